// ServeDeck console behaviour that htmx does not cover: copy buttons.
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
