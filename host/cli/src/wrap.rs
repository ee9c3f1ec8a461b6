//! Breaking talaria's own lines at word boundaries for the terminal's width (style sequences
//! take no columns), shared by [`crate::ui`] and the footer ([`crate::screen`]).

use unicode_width::UnicodeWidthStr as _;

/// `text` broken at spaces into rows of at most `width` columns, rows after the first
/// indented by `indent` spaces; `first` columns of the first row are taken already (by a
/// prefix printed before it). The text's own line breaks are kept, and a word wider than a row
/// stays whole (the terminal breaks it). Style sequences take no columns.
pub fn wrap_after(text: &str, width: usize, indent: usize, first: usize) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let pad = " ".repeat(indent);
    for (n, line) in text.split('\n').enumerate() {
        let mut used = if n == 0 { first } else { indent };
        if n > 0 {
            out.push('\n');
            out.push_str(&pad);
        }
        let mut fresh = true;
        for word in line.split(' ') {
            let w = anstream::adapter::strip_str(word).to_string().width();
            if !fresh && used + 1 + w > width {
                out.push('\n');
                out.push_str(&pad);
                used = indent;
                fresh = true;
            }
            if !fresh {
                out.push(' ');
                used += 1;
            }
            out.push_str(word);
            used += w;
            fresh = false;
        }
    }
    out
}

/// `parts` joined by `sep` within `width` columns, a part that would go past it starting a row
/// of its own indented by `indent`.
pub fn join_within(parts: &[String], sep: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for (i, part) in parts.iter().enumerate() {
        let w = part.width();
        if i > 0 && used + sep.width() + w > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            used = indent;
        } else if i > 0 {
            out.push_str(sep);
            used += sep.width();
        }
        out.push_str(part);
        used += w;
    }
    out
}
