// pluglog console: pages whose <body> has data-live="N" refresh their <main>
// every N seconds (same URL, same-origin fetch), so lag and partition health
// stay current without reloading the page. Nothing else runs.
"use strict";
(function () {
  var seconds = Number(document.body.getAttribute("data-live"));
  if (!seconds) { return; }
  function refresh() {
    if (document.hidden) { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        var main = document.getElementById("main");
        if (fresh && main) { main.replaceChildren.apply(main, Array.from(fresh.childNodes)); }
      })
      .catch(function () { /* the broker is restarting: try again next time */ });
  }
  window.setInterval(refresh, seconds * 1000);
})();
