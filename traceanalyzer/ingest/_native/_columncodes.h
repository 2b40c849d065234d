/* Column type codes that Python and the compiled passes exchange.
 *
 * The one C side of traceanalyzer/ingest/column_codes.py (ColumnKind and LayoutLetter there);
 * tests/ingest/test_column_codes.py checks that the two agree. */
#ifndef TRACEANALYZER_COLUMNCODES_H
#define TRACEANALYZER_COLUMNCODES_H

/* The kind of a field the event decoder reads (ColumnKind). */
enum { K_TEXT = 0, K_INT = 1, K_FLOAT = 2 };

/* The letters of a table's layout, a letter per column (LayoutLetter): how the reduction and the
 * assembly write their columns and the Arrow streams export them. */
#define LAYOUT_TEXT 't'
#define LAYOUT_INT64 'l'
#define LAYOUT_INT32 'i'
#define LAYOUT_BOOL 'b'
#define LAYOUT_LETTERS "tlib"

#endif
