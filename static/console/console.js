// ServeDeck console behaviour that htmx does not cover. No inline handlers anywhere: the
// Content-Security-Policy allows scripts from this site's files only, so pages say what they
// need with data- attributes and this file acts on them.
(() => {
  "use strict";

  // Copy buttons: <button class="copy" data-copy="#selector">.
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.copy[data-copy]");
    if (!button) return;
    const source = document.querySelector(button.dataset.copy);
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(() => {
      const label = button.textContent;
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = label; }, 1500);
    }, () => { button.textContent = "Select and copy"; });
  });

  // <button data-fill-from="#example" data-fill-into="#field">: put the example's text into
  // the field (Deploy from YAML's example manifest), replacing what it held.
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-fill-from][data-fill-into]");
    if (!button) return;
    const source = document.querySelector(button.dataset.fillFrom);
    const field = document.querySelector(button.dataset.fillInto);
    if (!source || !field) return;
    field.value = source.textContent;
    field.focus();
  });

  // <form data-confirm="Delete x?">: ask before submitting. The question is text from an
  // attribute, never code, so a name with quotes stays a name. With data-confirm-name="x"
  // the answer is the name typed into the form's confirm_name field, which the server checks
  // (a wrong one changes nothing and says so): left empty, the name is asked for here.
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (!form) return;
    if (form.dataset.confirmName === undefined) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      return;
    }
    const field = form.elements.namedItem("confirm_name");
    if (!field || field.value.trim()) return;
    const typed = window.prompt(form.dataset.confirm, "");
    if (typed === null) { event.preventDefault(); return; }
    field.value = typed;
  });

  // <select data-submit-on-change>: the organisation switcher submits when a new one is picked.
  document.addEventListener("change", (event) => {
    const select = event.target.closest("select[data-submit-on-change]");
    if (select && select.form) select.form.requestSubmit();
  });

  // <div data-shown-when="backend:kubernetes">: shown only while the form's field `backend`
  // holds that value (a local cluster has no kubeconfig); the server ignores it otherwise.
  const showWhen = (root) => {
    root.querySelectorAll("form [data-shown-when]").forEach((part) => {
      const [name, value] = part.dataset.shownWhen.split(":");
      const field = part.closest("form").elements.namedItem(name);
      if (field) part.hidden = field.value !== value;
    });
  };
  showWhen(document);
  document.addEventListener("change", (event) => {
    const form = event.target.form;
    if (form && form.querySelector("[data-shown-when]")) showWhen(form.parentNode);
  });
  document.addEventListener("htmx:afterSettle", (event) => showWhen(event.target));

  // A form opened for another organisation than the session's is refused with 409 and a page
  // saying so: show it in place of the page's content instead of leaving the click unanswered.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const xhr = event.detail.xhr;
    if (xhr.status !== 409 || !xhr.getResponseHeader("X-Organization-Mismatch")) return;
    const main = document.getElementById("main");
    if (!main) return;
    event.detail.shouldSwap = true;
    event.detail.isError = false;
    event.detail.target = main;
    event.detail.swapOverride = "innerHTML";
  });
})();
