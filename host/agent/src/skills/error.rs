//! Why a skill is refused: its `SKILL.md` text ([`ParseError`]), or the skill on disk, its files
//! and the home's records of skills ([`SkillError`]).
//!
//! Each message is what the user (or, through `skill_view`, the model) reads. Where it quotes an
//! I/O or parse error, that error is a field of the variant and not its `source()`: the message
//! already says it, and a front door printing the error's chain would say it twice.
//!
//! ```
//! use talaria_agent::skills::{ParseError, Source, parse};
//! let refused = parse("# no front matter", "tidy", "general", Source::User, None);
//! assert!(matches!(refused, Err(ParseError::NoFrontMatter)));
//! ```

use std::io;
use std::path::{Path, PathBuf};

use super::MAX_SKILL_BYTES;

/// Why a `SKILL.md` text is not a skill ([`super::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("it has no front matter: start SKILL.md with a `---` line, `name:` and `description:`, and `---`")]
    NoFrontMatter,
    #[error("its front matter never ends: close it with a `---` line")]
    UnendedFrontMatter,
    #[error("its front matter is not valid YAML: {0}")]
    Yaml(yaml_rust2::ScanError),
    /// The front matter is YAML, but not a map.
    #[error("its front matter must be `key: value` lines")]
    NotKeyValue,
    /// `name` (or, without one, the directory's name) is not 1-64 of a-z, 0-9 and `-`.
    #[error("its name `{name}` must be 1-64 characters of a-z, 0-9 and `-`")]
    BadName { name: String },
    #[error("its front matter has no `description`")]
    NoDescription,
    /// The description or body looks like a prompt injection ([`crate::injection::scan`]).
    #[error("it looks like a prompt injection ({reason}); read it before trusting it")]
    Injection { reason: &'static str },
}

/// Why a skill on disk is not read, one of its files is not shown, or a record of skills cannot
/// be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    // Reading a skill's SKILL.md ([`super::read_one`]); discovery warns with the same words.
    /// Its `SKILL.md` is a link.
    #[error("skill {name} left out: {} is a link", file.display())]
    SkillMdIsLink { name: String, file: PathBuf },
    /// Its `SKILL.md` is over [`MAX_SKILL_BYTES`].
    #[error("skill {name} left out: {} is over {} KiB", file.display(), MAX_SKILL_BYTES / 1024)]
    SkillMdTooLarge { name: String, file: PathBuf },
    #[error("skill {name} left out: {}: {error}", file.display())]
    SkillMdUnreadable { name: String, file: PathBuf, error: io::Error },
    #[error("skill {name} left out ({}): {error}", file.display())]
    SkillMdInvalid { name: String, file: PathBuf, error: ParseError },

    // One of a skill's files ([`super::read_file`]).
    /// A bundled skill: it has no directory.
    #[error("skill {skill} has no files")]
    NoFiles { skill: String },
    /// Not a plain path under `references/`, `templates/` or `scripts/`.
    #[error(
        "`{file}` is not one of skill {skill}'s files: give a path under references/, templates/ or scripts/ (its files: {})",
        files.join(", ")
    )]
    NotItsFile { skill: String, file: String, files: Vec<String> },
    #[error("skill {skill} has no file {file} (its files: {})", files.join(", "))]
    NoSuchFile { skill: String, file: String, files: Vec<String> },
    /// The skill's directory cannot be opened.
    #[error("cannot open skill {skill}: {error}")]
    Open { skill: String, error: io::Error },
    /// The file leads out of the skill, is too large or cannot be read.
    #[error("{file}: {error}")]
    Read { file: String, error: talaria_beneath::Error },
    #[error("{file} is not text")]
    NotText { file: String },
    #[error("{file} of skill {skill} looks like a prompt injection ({reason}); it is not shown: tell the user")]
    InjectedFile { skill: String, file: String, reason: &'static str },

    // An installed skill's files ([`super::installed::hash_files`], [`super::installed::verify`]).
    #[error("{file} is a link; a skill holds only files")]
    FileIsLink { file: String },
    /// A top-level file or directory that is not a skill's (`dir`: a directory).
    #[error(
        "{file}{} is not a skill's: a skill holds SKILL.md, a README or LICENSE, and references/, templates/ and scripts/",
        if *dir { "/" } else { "" }
    )]
    Foreign { file: String, dir: bool },
    #[error("{dir}/ is nested too deep")]
    TooDeep { dir: String },
    /// A FIFO, socket or device.
    #[error("{file} is not a regular file")]
    NotRegular { file: String },
    /// Recorded in the lockfile, gone from disk.
    #[error("{file} is missing")]
    Missing { file: String },
    /// Its content differs from the lockfile's digest.
    #[error("{file} was changed")]
    Changed { file: String },
    /// On disk, not in the lockfile.
    #[error("{file} was added")]
    Added { file: String },

    // Files and records in the home (`skills.lock`, the agent's lists, the skills it writes).
    /// `path` cannot be read, listed, written or removed.
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    /// `skills.lock` is not a valid lockfile.
    #[error("{}: {error}", path.display())]
    Lock { path: PathBuf, error: toml::de::Error },
    /// The lockfile cannot be written as TOML.
    #[error("{0}")]
    Encode(toml::ser::Error),
}

impl SkillError {
    /// [`SkillError::Io`] about `path`.
    pub(crate) fn io(path: &Path, error: io::Error) -> Self {
        SkillError::Io { path: path.to_path_buf(), error }
    }
}
