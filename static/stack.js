// Tables of class "stack" read as one block per row on a narrow screen (app.css): each
// cell is labelled with its column's header, unless its template labelled it already
// (data-label). A cell spanning columns (an empty table's message) keeps no label. Only a
// table's own header and cells: a table nested in a cell (a run's changes) has its own.
(function () {
  function label(root) {
    for (const table of (root || document).querySelectorAll("table.stack")) {
      const heads = Array.from(table.querySelectorAll(":scope > thead > tr > th"), (th) => th.textContent.trim());
      for (const row of table.querySelectorAll(":scope > tbody > tr")) {
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
