//! Where talaria's own log lines (tracing) go: to `$TALARIA_HOME/logs/talaria.log`, so that a
//! warning from deep inside the runtime never lands in the middle of a chat, or to stderr with
//! `-v` / `TALARIA_LOG`. The file is opened when the first line is written (a run that logs
//! nothing touches nothing), is readable only by the user, and starts afresh once it passes
//! [`LIMIT`] (the previous one kept as `talaria.log.1`).
//!
//! A line often quotes what a plugin, a platform or a server sent. tracing escapes the ESC and
//! BEL in values; [`OneLine`] escapes what is left (a carriage return, a line break inside the
//! line, the other controls, the bidi overrides), so a quoted text can neither rewrite a line on
//! the terminal nor forge one of its own.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Size at which the log starts afresh.
const LIMIT: u64 = 5 << 20;

/// Start logging: at `warn` to the log file; with `-v` (info), `-vv` (debug) or a `TALARIA_LOG`
/// filter, to stderr. With `[telemetry]` (or the `OTEL_EXPORTER_OTLP_*` variables), traces go
/// to the collector too: the exporter returned is to be finished at exit.
/// A `service` tries failed exports again ([`talaria_core::telemetry::start`]).
pub fn init(verbose: u8, service: bool) -> Option<talaria_core::telemetry::Tracing> {
    let asked = std::env::var("TALARIA_LOG").ok().filter(|f| !f.trim().is_empty());
    let to_stderr = verbose > 0 || asked.is_some();
    let filter = asked.unwrap_or_else(|| {
        match verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
        .to_string()
    });
    let home = talaria_core::config::home().ok();
    let file = if to_stderr { None } else { home.clone() };
    let (traces, problem) = match home.as_deref().map(|home| talaria_core::telemetry::start(home, service)) {
        Some(Ok(traces)) => (traces, None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let (layer, tracing) = traces.unzip();
    // The log keeps its filter; the traces layer, when there is one, takes the spans meant for
    // export, whatever the log's level. With neither wanting a span, it costs a cached check.
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let log = match file {
        Some(home) => tracing_subscriber::fmt::layer()
            .with_writer(OneLine(LogFile::new(home.join("logs").join("talaria.log"))))
            .with_ansi(false)
            .with_filter(EnvFilter::new(filter))
            .boxed(),
        None => tracing_subscriber::fmt::layer()
            .with_writer(OneLine(io::stderr))
            .with_ansi(stderr_colour())
            .without_time()
            .with_filter(EnvFilter::new(filter))
            .boxed(),
    };
    let _ = tracing_subscriber::registry().with(layer).with(log).try_init();
    if let Some(problem) = problem {
        crate::ui::warn(&format!("traces are off: {problem}"));
    }
    tracing
}

fn stderr_colour() -> bool {
    std::env::var_os("NO_COLOR").is_none() && io::IsTerminal::is_terminal(&io::stderr())
}

/// The log file, opened on first use.
struct LogFile {
    path: PathBuf,
    file: OnceLock<Option<Mutex<File>>>,
}

impl LogFile {
    fn new(path: PathBuf) -> Self {
        Self { path, file: OnceLock::new() }
    }

    fn open(&self) -> Option<&Mutex<File>> {
        self.file.get_or_init(|| open_log(&self.path).ok().map(Mutex::new)).as_ref()
    }
}

fn open_log(path: &std::path::Path) -> io::Result<File> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > LIMIT) {
        let _ = std::fs::rename(path, path.with_extension("log.1"));
    }
    OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter(self.open())
    }
}

/// One log line's writer: the file, or nowhere when it could not be opened (logging never
/// fails a command).
struct LogWriter<'a>(Option<&'a Mutex<File>>);

impl Write for LogWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(file) = self.0
            && let Ok(mut file) = file.lock()
        {
            let _ = file.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writers whose every write (one formatted event) becomes one line: see the module docs.
struct OneLine<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = Escaped<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaped(self.0.make_writer())
    }
}

struct Escaped<W>(W);

impl<W: Write> Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(one_line(buf).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A formatted event as one line: its own line end kept, every other control but the ESC of
/// tracing's colours escaped (the ESC in values tracing escaped already).
fn one_line(buf: &[u8]) -> String {
    let text = String::from_utf8_lossy(buf);
    let (body, end) = match text.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (&*text, ""),
    };
    let parts: Vec<String> = body.split('\x1b').map(|p| talaria_runtime::visible(p, usize::MAX)).collect();
    parts.join("\x1b") + end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_text_cannot_rewrite_or_forge_a_line() {
        let event = "\x1b[33mWARN\x1b[0m adapter said: ok\rINFO all good\nERROR forged \u{202e}txt\n";
        assert_eq!(
            one_line(event.as_bytes()),
            "\x1b[33mWARN\x1b[0m adapter said: ok\\rINFO all good\\nERROR forged \\u{202e}txt\n"
        );
    }

    #[test]
    fn lines_go_to_a_private_file_made_on_first_write_and_a_full_one_starts_afresh() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs").join("talaria.log");
        let log = LogFile::new(path.clone());
        assert!(!path.exists(), "nothing is made before a line is written");
        log.make_writer().write_all(b"first\n").expect("write");
        log.make_writer().write_all(b"second\n").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "first\nsecond\n");
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        let logs = path.parent().expect("dir");
        assert_eq!(std::fs::metadata(logs).expect("meta").permissions().mode() & 0o777, 0o700);

        std::fs::write(&path, vec![b'x'; usize::try_from(LIMIT).expect("fits") + 1]).expect("fill");
        let log = LogFile::new(path.clone());
        log.make_writer().write_all(b"fresh\n").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "fresh\n");
        assert!(path.with_extension("log.1").exists(), "the full log is kept once");
    }

    #[test]
    fn a_link_planted_where_the_log_goes_is_not_followed() {
        let dir = tempfile::tempdir().expect("dir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep me\n").expect("write");
        std::fs::create_dir(dir.path().join("logs")).expect("dir");
        let path = dir.path().join("logs").join("talaria.log");
        std::os::unix::fs::symlink(&target, &path).expect("link");
        let log = LogFile::new(path);
        log.make_writer().write_all(b"line\n").expect("writing never fails");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep me\n");
    }
}
