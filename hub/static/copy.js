// Copy buttons for the install commands on an environment's page. The page works without this
// script (the commands are plain text); with it, each [data-copy] button copies its block's text.
(function () {
  "use strict";
  function select(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  function flash(btn, text) {
    btn.textContent = text;
    window.setTimeout(function () { btn.textContent = "Copy"; }, 1500);
  }
  function fallback(btn, el) {
    select(el);
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    flash(btn, ok ? "Copied" : "Press Ctrl+C");
  }
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("button[data-copy]") : null;
    if (!btn) return;
    var el = document.getElementById(btn.getAttribute("data-copy"));
    if (!el) return;
    var text = el.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { flash(btn, "Copied"); },
        function () { fallback(btn, el); }
      );
    } else {
      fallback(btn, el);
    }
  });
  document.querySelectorAll("button[data-copy]").forEach(function (btn) { btn.hidden = false; });
})();
