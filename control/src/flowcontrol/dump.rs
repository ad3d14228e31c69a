//! The debug dumps' text: rows of cells separated by `,\t`, aligned as Go's
//! `text/tabwriter` aligns them with kube's settings (minimum width 8, padding 1, spaces),
//! and times as Go's RFC 3339 with nanoseconds.

use std::time::SystemTime;

const MIN_WIDTH: usize = 8;
const PADDING: usize = 1;

/// Aligns `text` (lines of tab-terminated cells) as Go's tabwriter does: a column is a run
/// of consecutive lines that have a cell there, as wide as its widest cell plus the padding
/// (at least the minimum width); a line's last cell is not aligned.
pub fn tabwrite(text: &str) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut w = Writer {
        lines: &lines,
        widths: Vec::new(),
        out: String::with_capacity(text.len() * 2),
    };
    w.format(0, lines.len());
    w.out
}

struct Writer<'a> {
    lines: &'a [Vec<&'a str>],
    widths: Vec<usize>,
    out: String,
}

impl Writer<'_> {
    /// Whether line `i` has an aligned cell in `column` (its last cell is not aligned).
    fn has_cell(&self, i: usize, column: usize) -> bool {
        column + 1 < self.lines[i].len()
    }

    fn format(&mut self, mut line0: usize, line1: usize) {
        let column = self.widths.len();
        let mut this = line0;
        while this < line1 {
            if !self.has_cell(this, column) {
                this += 1;
                continue;
            }
            // A block of lines with a cell in this column starts here.
            self.write_lines(line0, this);
            line0 = this;
            let mut width = MIN_WIDTH;
            while this < line1 && self.has_cell(this, column) {
                width = width.max(self.lines[this][column].chars().count() + PADDING);
                this += 1;
            }
            self.widths.push(width);
            self.format(line0, this);
            self.widths.pop();
            line0 = this;
        }
        self.write_lines(line0, line1);
    }

    fn write_lines(&mut self, line0: usize, line1: usize) {
        for i in line0..line1 {
            for (j, cell) in self.lines[i].iter().enumerate() {
                self.out.push_str(cell);
                if let Some(width) = self.widths.get(j) {
                    let pad = width.saturating_sub(cell.chars().count());
                    self.out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            // The last line is what follows the last newline: no newline of its own.
            if i + 1 < self.lines.len() {
                self.out.push('\n');
            }
        }
    }
}

/// A row of the dumps: cells joined by `,\t`.
pub fn row<S: AsRef<str>>(cells: &[S]) -> String {
    cells
        .iter()
        .map(|c| c.as_ref())
        .collect::<Vec<_>>()
        .join(",\t")
}

/// Go's `t.UTC().Format(time.RFC3339Nano)`; the zero time (a request not started) as Go
/// prints it.
pub fn rfc3339_nano(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "0001-01-01T00:00:00Z".into();
    };
    let full = humantime::format_rfc3339_nanos(t).to_string();
    // `2026-01-02T03:04:05.120000000Z`: the fraction without its trailing zeros.
    match full.split_once('.') {
        Some((seconds, fraction)) => {
            let digits = fraction.trim_end_matches('Z').trim_end_matches('0');
            if digits.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{digits}Z")
            }
        }
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn aligns_as_go_tabwriter() {
        let text = format!(
            "{}\n{}\n{}\n",
            row(&["PriorityLevelName", "ActiveQueues", "IsIdle"]),
            row(&["catch-all", "0", "true"]),
            row(&["global-default", "12", "false"]),
        );
        assert_eq!(
            tabwrite(&text),
            "PriorityLevelName, ActiveQueues, IsIdle\n\
             catch-all,         0,            true\n\
             global-default,    12,           false\n"
        );
        // Short cells still take the minimum width; a line's last cell is not padded.
        assert_eq!(tabwrite("a,\tb\nccc,\td\n"), "a,      b\nccc,    d\n");
        // Columns are blocks of consecutive lines: a line without the cell ends one.
        assert_eq!(
            tabwrite("a,\tb,\tc\nx\nlonger-cell,\ty\n"),
            "a,      b,      c\nx\nlonger-cell, y\n"
        );
    }

    #[test]
    fn times_as_go_prints_them() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        assert_eq!(rfc3339_nano(Some(at)), "2026-01-02T03:04:05Z");
        assert_eq!(
            rfc3339_nano(Some(at + Duration::from_nanos(120_000_000))),
            "2026-01-02T03:04:05.12Z"
        );
        assert_eq!(
            rfc3339_nano(Some(at + Duration::from_nanos(1))),
            "2026-01-02T03:04:05.000000001Z"
        );
        assert_eq!(rfc3339_nano(None), "0001-01-01T00:00:00Z");
    }
}
