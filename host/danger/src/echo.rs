//! What `echo` and `printf` print, so that text piped from them into a shell is checked as the
//! command line it becomes (`printf '\x72\x6d -rf /' | sh` is `rm -rf /`).
//!
//! The emulation is close enough for that purpose, not exact: escapes are always decoded (dash's
//! `echo` does so, bash's does with `-e`), and `printf` conversions insert their argument as text.

/// The escapes `echo -e`, `printf`, `printf %b` and `$'...'` understand. Decoding stops at `\c`.
pub(super) fn unescape(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        if c[i] != '\\' || i + 1 == c.len() {
            out.push(c[i]);
            i += 1;
            continue;
        }
        i += 1;
        let simple = match c[i] {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'v' => Some('\u{b}'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            '"' => Some('"'),
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            i += 1;
            continue;
        }
        let (radix, max, skip) = match c[i] {
            'c' => return out,
            'x' => (16, 2, 1),
            'u' => (16, 4, 1),
            'U' => (16, 8, 1),
            '0' => (8, 3, 1),
            '1'..='7' => (8, 3, 0),
            other => {
                out.push('\\');
                out.push(other);
                i += 1;
                continue;
            }
        };
        let start = i + skip;
        let digits: String = c[start.min(c.len())..].iter().take(max).take_while(|d| d.is_digit(radix)).collect();
        match u32::from_str_radix(&digits, radix).ok().and_then(char::from_u32) {
            Some(ch) => out.push(ch),
            None if digits.is_empty() && skip == 1 && c[i] != '0' => {
                out.push('\\');
                out.push(c[i]);
            }
            None => {}
        }
        i = start + digits.chars().count();
    }
    out
}

/// What `echo ARGS` prints (with its trailing newline dropped).
pub(super) fn echo(args: &[String]) -> String {
    let flags =
        args.iter().take_while(|a| a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|f| "neE".contains(f)));
    let skip = flags.count();
    unescape(&args[skip..].join(" "))
}

/// What `printf FORMAT ARGS` prints, roughly: each conversion takes the next argument as text, and
/// the format is reused while arguments remain, as printf does.
pub(super) fn printf(args: &[String]) -> String {
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        Some("-v") => return String::new(), // assigns to a variable, prints nothing
        _ => args,
    };
    let Some((format, mut rest)) = args.split_first() else { return String::new() };
    let format: Vec<char> = format.chars().collect();
    let mut out = String::new();
    loop {
        let before = rest.len();
        let mut i = 0;
        while i < format.len() {
            if format[i] != '%' {
                let end = (i..format.len()).find(|&j| format[j] == '%').unwrap_or(format.len());
                out.push_str(&unescape(&format[i..end].iter().collect::<String>()));
                i = end;
                continue;
            }
            if format.get(i + 1) == Some(&'%') {
                out.push('%');
                i += 2;
                continue;
            }
            // flags, width and precision, then the conversion character
            let mut j = i + 1;
            while j < format.len() && "-+ #0123456789.*'".contains(format[j]) {
                j += 1;
            }
            let arg = rest.first().map_or("", String::as_str);
            rest = rest.get(1..).unwrap_or_default();
            match format.get(j) {
                Some('b') => out.push_str(&unescape(arg)),
                Some('c') => out.extend(arg.chars().next()),
                Some(_) => out.push_str(arg),
                None => {}
            }
            i = j + 1;
        }
        if rest.is_empty() || rest.len() == before {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn escapes_decode_as_the_shell_does() {
        assert_eq!(unescape(r"\x72\x6d -rf /"), "rm -rf /");
        assert_eq!(unescape(r"\162\155 \0055rf"), "rm -rf");
        assert_eq!(unescape(r"a\tb\nc\\d\q"), "a\tb\nc\\d\\q");
        assert_eq!(unescape(r"\u0072m\cignored"), "rm");
        assert_eq!(unescape(r"\xZZ"), r"\xZZ");
    }

    #[test]
    fn echo_and_printf_print_what_the_shell_would() {
        assert_eq!(echo(&strings(&["-e", r"rm\x20-rf", "/"])), "rm -rf /");
        assert_eq!(echo(&strings(&["-n", "ls"])), "ls");
        assert_eq!(echo(&strings(&["-rf"])), "-rf");
        assert_eq!(printf(&strings(&[r"%s\n", "rm -rf /", "ls"])), "rm -rf /\nls\n");
        assert_eq!(printf(&strings(&[r"%s %s", "rm", "-rf", "/"])), "rm -rf/ ");
        assert_eq!(printf(&strings(&["%b", r"\x72m"])), "rm");
        assert_eq!(printf(&strings(&["100%% %c", "done"])), "100% d");
        assert_eq!(printf(&strings(&["-v", "x", "rm"])), "");
    }
}
