//! Asking a person which capabilities a plugin may have, for every command that grants them:
//! `talaria plugins install` and `update`, and `talaria plugin dev`.
//!
//! What is asked is a [`Consent`]: the capabilities a version requests that the installed one
//! did not (`new`), beside those kept and those dropped. [`lines`] shows it as a diff (`+` for
//! what is asked, `-` for what goes); [`decide`] takes the command line's answer (`--yes`,
//! `--grant CAP`), else asks on a terminal, else does what [`Nobody`] says.
//!
//! ```
//! use talaria_market::install::consent::{GrantFlags, Nobody, decide};
//! # let consent = talaria_market::install::Consent { name: "p".into(), version: "1.0.0".parse().unwrap(),
//! #     previous: None, requested: vec!["kv".parse().unwrap()], kept: vec![], new: vec!["kv".parse().unwrap()],
//! #     dropped: vec![], signer: None, digest: String::new(), source: "./p".into() };
//! let flags = GrantFlags { yes: true, grants: Vec::new() };
//! assert_eq!(decide(&consent, &flags, &Nobody::GrantNothing).unwrap(), consent.new);
//! ```

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use talaria_runtime::{Access, Capability};

use super::{Consent, caps_list};

/// Consent given on the command line.
#[derive(Debug, Clone, Default)]
pub struct GrantFlags {
    /// `--yes`: everything requested.
    pub yes: bool,
    /// `--grant CAP` (repeatable; `all` = everything requested).
    pub grants: Vec<String>,
}

impl GrantFlags {
    /// Whether the command line said anything about grants.
    pub fn given(&self) -> bool {
        self.yes || !self.grants.is_empty()
    }
}

/// What to do when the command line says nothing and no terminal can ask.
#[derive(Debug, Clone)]
pub enum Nobody {
    /// Grant nothing new; the plugin installs without it (`plugins install` in a script).
    GrantNothing,
    /// Refuse, with this sentence saying how to grant (`plugin dev` installs nothing ungranted).
    Refuse(String),
}

/// Why no consent was given.
#[derive(Debug, thiserror::Error)]
pub enum ConsentError {
    /// A `--grant` that is not a capability.
    #[error("{0}")]
    BadGrant(talaria_runtime::CapabilityError),
    /// A `--grant` of something the manifest does not request.
    #[error(
        "{name} does not request {cap} (it requests: {}); a grant can only allow what the manifest asks for",
        caps_list(requested)
    )]
    NotRequested { name: String, cap: Capability, requested: Vec<Capability> },
    /// Nobody could be asked and the caller refuses then ([`Nobody::Refuse`]), or the caller
    /// refused for a reason of its own: says how to consent.
    #[error("{0}")]
    Refused(String),
    /// Standard input could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What each capability lets a plugin do, in words.
pub fn describe(cap: &Capability) -> String {
    match cap {
        Capability::Fs { path, access: Access::Read } => format!("read files under {path}"),
        Capability::Fs { path, access: Access::ReadWrite } => format!("read and write files under {path}"),
        Capability::Net(host) => format!("make HTTP requests to {host}"),
        Capability::Secret { name, host } => {
            format!("have your secret {name} sent to {host} (the plugin never sees its value)")
        }
        Capability::Process => "run shell commands (dangerous ones still need your approval)".into(),
        Capability::Kv => "keep private data in talaria's key-value store".into(),
        Capability::Llm => "ask the auxiliary model for completions (uses your tokens)".into(),
    }
}

/// The consent as a capability diff: a heading, `+ CAP  what it allows` for each capability
/// asked for, `- CAP` for each granted one no longer requested, and what stays granted.
pub fn lines(consent: &Consent) -> Vec<String> {
    let mut out = vec![match &consent.previous {
        Some(prev) => format!(
            "{} {prev} → {} requests capabilities the installed version did not:",
            consent.name, consent.version
        ),
        None => format!("{} {} requests:", consent.name, consent.version),
    }];
    for cap in &consent.new {
        out.push(format!("  + {:<32} {}", cap.to_string(), describe(cap)));
    }
    for cap in &consent.dropped {
        out.push(format!("  - {:<32} no longer requested, so no longer granted", cap.to_string()));
    }
    if !consent.kept.is_empty() {
        out.push(format!("  (still granted: {})", caps_list(&consent.kept)));
    }
    out
}

/// Whether a person can be asked: standard input and standard error are a terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Print `prompt` on stderr and read one answer line (trimmed, lower case).
///
/// # Errors
/// Standard input cannot be read.
pub fn ask(prompt: &str) -> std::io::Result<String> {
    let mut err = std::io::stderr();
    let _ = write!(err, "{prompt}");
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_lowercase())
}

/// Show `consent` on stderr and decide which of its new capabilities to grant: `--yes` or
/// `--grant` when given, else the person's answer on a terminal, else what `nobody` says.
///
/// # Errors
/// [`ConsentError::BadGrant`] or [`ConsentError::NotRequested`] for a `--grant` the manifest
/// does not request, [`ConsentError::Refused`] for [`Nobody::Refuse`] with nobody to ask, or
/// [`ConsentError::Io`] with standard input unreadable.
pub fn decide(consent: &Consent, flags: &GrantFlags, nobody: &Nobody) -> Result<Vec<Capability>, ConsentError> {
    for line in lines(consent) {
        eprintln!("{line}");
    }
    if flags.yes || flags.grants.iter().any(|g| g == "all") {
        return Ok(consent.new.clone());
    }
    if !flags.grants.is_empty() {
        let mut out = Vec::new();
        for g in &flags.grants {
            let cap = g.parse::<Capability>().map_err(ConsentError::BadGrant)?;
            if consent.new.iter().any(|r| r.covers(&cap)) {
                out.push(cap);
            } else if !consent.requested.iter().any(|r| r.covers(&cap)) {
                return Err(ConsentError::NotRequested {
                    name: consent.name.clone(),
                    cap,
                    requested: consent.requested.clone(),
                });
            }
        }
        return Ok(out);
    }
    if !interactive() {
        return match nobody {
            Nobody::GrantNothing => Ok(Vec::new()),
            Nobody::Refuse(how) => Err(ConsentError::Refused(how.clone())),
        };
    }
    let answer = ask("Grant them? [a]ll, [n]one, or [c]hoose one by one: ")?;
    match answer.as_str() {
        "a" | "all" | "y" | "yes" => Ok(consent.new.clone()),
        "c" | "choose" => {
            let mut out = Vec::new();
            for cap in &consent.new {
                if matches!(ask(&format!("  grant {cap}? [y/N] "))?.as_str(), "y" | "yes") {
                    out.push(cap.clone());
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consent(new: &[&str], kept: &[&str], dropped: &[&str]) -> Consent {
        let caps = |c: &[&str]| c.iter().map(|c| c.parse::<Capability>().expect("cap")).collect::<Vec<_>>();
        Consent {
            name: "devp".into(),
            version: "0.1.0".parse().expect("version"),
            previous: Some("0.1.0".parse().expect("version")),
            requested: [caps(new), caps(kept)].concat(),
            kept: caps(kept),
            new: caps(new),
            dropped: caps(dropped),
            signer: None,
            digest: String::new(),
            source: "/p".into(),
        }
    }

    #[test]
    fn the_diff_shows_what_is_added_and_what_goes() {
        let shown = lines(&consent(&["fs:rw:/", "process"], &["kv"], &["llm"])).join("\n");
        assert!(shown.starts_with("devp 0.1.0 → 0.1.0 requests capabilities the installed version did not:"));
        assert!(shown.contains("\n  + fs:rw:/ ") && shown.contains("read and write files under /"), "{shown}");
        assert!(shown.contains("\n  + process "), "{shown}");
        assert!(shown.contains("\n  - llm ") && shown.contains("no longer requested"), "{shown}");
        assert!(shown.ends_with("(still granted: kv)"), "{shown}");
    }

    #[test]
    fn flags_grant_only_what_is_requested_and_nobody_refuses_when_told() {
        let c = consent(&["fs:rw:/", "process"], &[], &[]);
        let yes = GrantFlags { yes: true, grants: Vec::new() };
        assert_eq!(decide(&c, &yes, &Nobody::Refuse("no".into())).expect("yes"), c.new);
        let one = GrantFlags { yes: false, grants: vec!["process".into()] };
        assert_eq!(decide(&c, &one, &Nobody::GrantNothing).expect("one"), vec![Capability::Process]);
        let stranger = GrantFlags { yes: false, grants: vec!["llm".into()] };
        assert!(
            decide(&c, &stranger, &Nobody::GrantNothing)
                .expect_err("not requested")
                .to_string()
                .contains("does not request llm")
        );
        // Tests run without a terminal on stdin.
        if !interactive() {
            let none = GrantFlags::default();
            assert_eq!(decide(&c, &none, &Nobody::GrantNothing).expect("nothing"), Vec::<Capability>::new());
            assert_eq!(
                decide(&c, &none, &Nobody::Refuse("pass --yes".into())).expect_err("refused").to_string(),
                "pass --yes"
            );
        }
    }
}
