// Deploy model wizard: what htmx does not cover. Focus after a step is swapped in, arrow keys
// through the Hugging Face list, "pin the current commit", and a GPU kind's own size.
(() => {
  "use strict";
  // A page htmx brings back from history runs this script again: listen once.
  if (window.servedeckWizard) return;
  window.servedeckWizard = true;

  // A new step: focus its first field with a problem, else its heading (screen readers
  // announce where they are; keyboard users go on from there).
  document.addEventListener("htmx:afterSettle", (event) => {
    // An outerHTML swap reports the element it replaced: compare ids, not elements.
    const wizard = document.getElementById("wizard");
    if (!wizard || event.detail.target?.id !== "wizard") return;
    const invalid = wizard.querySelector("[aria-invalid='true']");
    const heading = document.getElementById("step-title");
    (invalid || heading)?.focus();
  });

  // What each input of the step's form showed when it arrived: sent with Next or Back as
  // "shown", so the server writes only the inputs the user changed. Read once per form (a
  // refresh of the GPU tiles inside it keeps the first reading).
  const recordShown = () => {
    const form = document.getElementById("wizard-form");
    const field = form?.querySelector("input[data-shown]");
    if (!form || !field || field.value) return;
    const shown = {};
    for (const input of form.elements) {
      if (!input.name || input.disabled || input === field || input.type === "submit") continue;
      if ((input.type === "checkbox" || input.type === "radio") && !input.checked) continue;
      shown[input.name] = input.value;
    }
    field.value = JSON.stringify(shown);
  };
  recordShown();
  document.addEventListener("htmx:afterSwap", recordShown);
  document.addEventListener("htmx:historyRestore", recordShown);

  // A new draft's first Next: the history entry of /deploy/ becomes the draft's Model step,
  // so Back shows the draft as saved (and Next there goes on with it).
  document.addEventListener("htmx:beforeHistoryUpdate", (event) => {
    const modelStep = event.detail.xhr?.getResponseHeader("X-Wizard-Draft");
    if (modelStep) history.replaceState({ htmx: true }, "", modelStep);
  });

  // A page the browser kept in its back-forward cache shows old values: fetch it again.
  window.addEventListener("pageshow", (event) => {
    if (event.persisted && document.getElementById("wizard-form")) window.location.reload();
  });

  // A picked model suggests its name while the name is empty (or still the last suggestion).
  document.addEventListener("htmx:afterSwap", (event) => {
    const source = document.getElementById("hub-source");
    const name = document.getElementById("wz-name");
    if (!source || !name || event.detail.target?.id !== "hub-source" || name.readOnly) return;
    const suggested = source.dataset.suggestedName;
    if (!suggested || (name.value && name.value !== name.dataset.suggested)) return;
    name.value = suggested;
    name.dataset.suggested = suggested;
    name.placeholder = suggested;
    name.dispatchEvent(new Event("input", { bubbles: true })); // the name status checks it
  });

  // The Hugging Face list: Down from the input into it, Up/Down within, Escape back out.
  const picks = () => Array.from(document.querySelectorAll("#hub-results .hub-pick"));
  document.addEventListener("keydown", (event) => {
    const input = document.getElementById("wz-repo");
    const results = document.getElementById("hub-results");
    if (!input || !results) return;
    const items = picks();
    const at = items.indexOf(document.activeElement);
    if (event.target === input && event.key === "ArrowDown" && items.length) {
      event.preventDefault();
      items[0].focus();
    } else if (at >= 0 && event.key === "ArrowDown") {
      event.preventDefault();
      items[Math.min(at + 1, items.length - 1)].focus();
    } else if (at >= 0 && event.key === "ArrowUp") {
      event.preventDefault();
      (at === 0 ? input : items[at - 1]).focus();
    } else if ((at >= 0 || event.target === input) && event.key === "Escape") {
      results.hidden = true;
      input.focus();
    }
  });

  document.addEventListener("click", (event) => {
    // "Pin the current commit" fills the revision field.
    const fill = event.target.closest("button[data-fill]");
    if (fill) {
      const target = document.querySelector(fill.dataset.fill);
      if (target) {
        target.value = fill.dataset.value;
        target.focus();
      }
    }
  });

  // The memory figures are refreshed while the user may be picking another tile: keep the
  // tile they picked, whatever the answer (a request may have left before the pick).
  let picked = null;
  document.addEventListener("htmx:beforeSwap", (event) => {
    if (event.detail.target?.id !== "gpu-tiles") return;
    picked = document.querySelector("#gpu-tiles input[name=gpu_kind]:checked")?.value ?? null;
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    if (event.detail.target?.id !== "gpu-tiles" || picked === null) return;
    const tile = document.querySelector(`#gpu-tiles input[name=gpu_kind][value="${CSS.escape(picked)}"]`);
    if (tile) tile.checked = true;
    picked = null;
  });

  // A sizing field changed: tell htmx with an event of its own (a trigger filter would be code
  // htmx evaluates, which the Content-Security-Policy forbids).
  document.addEventListener("input", (event) => {
    if (event.target instanceof Element && event.target.matches(".sizing-input")) {
      event.target.dispatchEvent(new CustomEvent("sizing-input", { bubbles: true }));
    }
  });

  // Picking a GPU kind takes its smallest size that holds the model (the tile says it);
  // capture phase, so the inputs are set before htmx asks for the memory figures.
  document.addEventListener(
    "change",
    (event) => {
      const tile = event.target;
      if (!(tile instanceof HTMLInputElement) || tile.name !== "gpu_kind") return;
      const gpus = document.getElementById("wz-gpus");
      const nodes = document.getElementById("wz-nodes");
      if (gpus && Number(tile.dataset.gpus) > 0) gpus.value = tile.dataset.gpus;
      if (nodes && Number(tile.dataset.gpus) > 0) {
        nodes.value = Number(tile.dataset.nodes) > 1 ? tile.dataset.nodes : "";
      }
      // The CPU holds the model in the replica's memory: fill in what it needs, if empty.
      const memory = document.getElementById("wz-memory");
      if (memory && tile.dataset.memory && !memory.value) memory.value = tile.dataset.memory;
    },
    true,
  );
})();
