//! The tables the CLI prints: one look for all of them (no borders, a rule under the
//! header, numbers right-aligned), at most 100 columns wide.

use comfy_table::{CellAlignment, ContentArrangement, Table};

/// comfy-table's style string: only the rule under the header (`-`, the sixth
/// component); columns are set apart by their padding, rows by nothing.
const STYLE: &str = "     -             ";

/// Widest a table may be; wider content wraps inside its cell.
const WIDTH: u16 = 100;

/// A table with this header; columns from `numeric_from` on are right-aligned.
pub fn new<S: ToString>(header: impl IntoIterator<Item = S>, numeric_from: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(STYLE)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(WIDTH)
        .set_header(
            header
                .into_iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>(),
        );
    for c in t.column_iter_mut().skip(numeric_from) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t
}

/// The table as text, one line per row, each line ending in a newline.
pub fn render(t: &Table) -> String {
    let mut s: String = t.lines().map(|l| l.trim_end().to_string() + "\n").collect();
    if s.is_empty() {
        s.push('\n');
    }
    s
}

/// Text for the terminal: lines longer than the table width (captions, notes) broken
/// at spaces; tables' own lines are never that long and stay as they are.
pub fn wrap(text: &str) -> String {
    let width = usize::from(WIDTH);
    let mut out = String::new();
    for line in text.lines() {
        let mut len = 0;
        for (i, word) in line.split(' ').enumerate() {
            let w = word.chars().count();
            if i > 0 && len + 1 + w > width && len > 0 {
                out.push('\n');
                len = 0;
            } else if i > 0 {
                out.push(' ');
                len += 1;
            }
            out.push_str(word);
            len += w;
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_within_the_width() {
        let mut t = new(["stack", "median µs"], 1);
        t.add_row(vec!["udp".to_string(), "12.3".into()]);
        t.add_row(vec!["natm-reliable".to_string(), "1234.5".into()]);
        let s = render(&t);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4, "{s}");
        assert!(lines
            .iter()
            .all(|l| l.chars().count() <= usize::from(WIDTH)));
        // Right-aligned numbers end in the same column.
        let end = |l: &str| l.trim_end().chars().count();
        assert_eq!(end(lines[2]), end(lines[3]), "{s}");
        assert_eq!(wrap(&s), s, "a table is not wrapped");
    }

    #[test]
    fn long_captions_break_at_spaces() {
        let caption = "word ".repeat(50);
        let wrapped = wrap(caption.trim_end());
        assert!(wrapped.lines().count() > 1, "{wrapped}");
        assert!(wrapped
            .lines()
            .all(|l| l.chars().count() <= usize::from(WIDTH)));
        assert_eq!(wrapped.split_whitespace().count(), 50);
    }
}
