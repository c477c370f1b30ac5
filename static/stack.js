// Tables of class "stack" read as one block per row on a narrow screen (app.css): each
// cell is labelled with its column's header, unless its template labelled it already
// (data-label). A cell spanning columns (an empty table's message) keeps no label.
(function () {
  function label(root) {
    for (const table of (root || document).querySelectorAll("table.stack")) {
      const heads = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
      for (const row of table.querySelectorAll("tbody tr")) {
        Array.from(row.children).forEach((cell, i) => {
          if (!cell.hasAttribute("data-label") && cell.colSpan === 1 && heads[i]) {
            cell.setAttribute("data-label", heads[i]);
          }
        });
      }
    }
  }
  document.addEventListener("DOMContentLoaded", () => label());
  document.addEventListener("htmx:afterSwap", (event) => label(event.target));
})();
