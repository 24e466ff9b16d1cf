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

  // A live socket the console closes says why by its close code (jobs/live/consumers.py); live
  // updates stop there (htmx reconnects on network failures only), so the page says so beside
  // the socket, and takes it back when a socket opens there again.
  const LIVE_CLOSED = {
    4400: "Live updates are off: this page asked for too many models or a malformed list. Reload it.",
    4401: "Live updates stopped: you are signed out. Sign in and open this page again.",
    4403: "Live updates stopped: you are not a member of this organisation any more.",
    4404: "Live updates stopped: this model is not in your organisation (deleted, or another organisation's).",
    4429: "Live updates are off on this page: you have more console pages open than one person may " +
      "follow live at once. Close pages of the console you no longer need, then reload this one.",
  };
  const liveNote = (socket) => {
    const next = socket.nextElementSibling;
    return next && next.classList.contains("live-closed") ? next : null;
  };
  document.addEventListener("htmx:wsClose", (event) => {
    const socket = event.target;
    const close = event.detail && event.detail.event;
    const text = close && LIVE_CLOSED[close.code];
    if (!text || !socket.classList || !socket.classList.contains("live-socket")) return;
    let note = liveNote(socket);
    if (!note) {
      note = document.createElement("p");
      note.className = "callout warn live-closed";
      note.setAttribute("role", "status");
      socket.after(note);
    }
    note.textContent = text;
  });
  document.addEventListener("htmx:wsOpen", (event) => {
    const note = event.target.classList && liveNote(event.target);
    if (note) note.remove();
  });
})();
