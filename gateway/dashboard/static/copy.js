// The dashboard's only script: "Copy" buttons. Without JavaScript the
// buttons stay hidden and the text can be selected by hand.
"use strict";
(function () {
  function select(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  async function copy(button) {
    var target = document.getElementById(button.getAttribute("data-copy"));
    if (!target) return;
    var text = target.textContent.trim();
    var status = button.parentNode.querySelector(".copied");
    try {
      await navigator.clipboard.writeText(text);
    } catch (err) {
      select(target);
      if (!document.execCommand("copy")) {
        if (status) status.textContent = "Selected: press Ctrl+C to copy";
        return;
      }
    }
    button.textContent = "Copied";
    if (status) status.textContent = "Copied to the clipboard";
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () { copy(button); });
  });
})();
