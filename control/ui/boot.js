// Loads the page again (once) when one of its scripts or styles could not be fetched: a
// network change (a Wi-Fi roam, an interface coming up) aborts the loads in flight, and the
// dashboard would otherwise stay blank. app.js clears the mark once it runs.
'use strict';
addEventListener('error', (e) => {
  const t = e.target;
  if (!(t instanceof HTMLScriptElement) && !(t instanceof HTMLLinkElement)) return;
  if (sessionStorage.getItem('skiff.reloaded')) return;
  sessionStorage.setItem('skiff.reloaded', '1');
  setTimeout(() => location.reload(), 500);
}, true);
