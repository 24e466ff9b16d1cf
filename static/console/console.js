// ServeDeck console behaviour that htmx does not cover: copy buttons and confirmations.
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

// Forms that change something hard to undo ask first: <form data-confirm="Remove x?">. The text
// is an attribute, never script, so names with quotes cannot break out of it.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
