// Sluice dashboard: the little JavaScript it has. Pages work without it; this only adds
// conveniences. (The Content-Security-Policy forbids inline scripts, so it lives here.)
(function () {
  "use strict";

  // Copy buttons: <button data-copy="ELEMENT-ID">. The clipboard API needs a secure context
  // (HTTPS or localhost); elsewhere the text is selected so Ctrl+C works.
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest("[data-copy]");
    if (!btn) return;
    var el = document.getElementById(btn.getAttribute("data-copy"));
    if (!el) return;
    var text = "value" in el ? el.value : el.textContent;
    var done = function (label) {
      var old = btn.textContent;
      btn.textContent = label;
      setTimeout(function () { btn.textContent = old; }, 1500);
    };
    if (el.select) el.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done("Copied"); }, function () { done("Press Ctrl+C"); });
    } else {
      done("Press Ctrl+C");
    }
  });

  // Read-only secret fields select their whole content on focus.
  document.addEventListener("focusin", function (ev) {
    if (ev.target.hasAttribute && ev.target.hasAttribute("data-select-on-focus")) ev.target.select();
  });
})();
