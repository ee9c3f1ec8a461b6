//! What programs do with their arguments: which words they write to, whether they delete
//! recursively, which run-time values matter to them. [`super::Scan`] asks these questions of the
//! program a command runs, after wrappers are looked through and long options written out.

use super::word::Word;
use super::{basename, wrapper};

/// Whether words only known at run time matter for `name`: it deletes, overwrites, kills or
/// reconfigures, so an unknown argument could be anything.
pub(super) fn dynamic_matters(name: &str, args: &[Word]) -> bool {
    match name {
        "rm" | "rmdir" | "unlink" | "shred" | "dd" | "chmod" | "chown" | "chgrp" | "chattr" | "kill" | "pkill"
        | "killall" | "mke2fs" | "mkswap" | "wipefs" | "fdisk" | "sfdisk" | "cfdisk" | "gdisk" | "sgdisk"
        | "parted" | "truncate" | "cp" | "mv" | "tee" | "install" | "ln" | "rsync" | "scp" | "find" | "systemctl"
        | "service" | "crontab" => true,
        "sed" | "perl" => in_place(args),
        "git" => {
            let Some(at) = wrapper::git_subcommand(args) else { return args.iter().any(|w| w.dynamic) };
            let destructive = matches!(
                args[at].text.as_str(),
                "push"
                    | "reset"
                    | "clean"
                    | "filter-branch"
                    | "filter-repo"
                    | "reflog"
                    | "gc"
                    | "prune"
                    | "config"
                    | "rm"
                    | "branch"
                    | "update-ref"
                    | "stash"
                    | "remote"
            );
            args[..=at].iter().any(|w| w.dynamic) || (destructive && args[at + 1..].iter().any(|w| w.dynamic))
        }
        "docker" | "podman" => {
            let Some(at) = args.iter().position(|w| !w.text.starts_with('-')) else { return false };
            let destructive = matches!(
                args[at].text.as_str(),
                "rm" | "rmi" | "kill" | "stop" | "prune" | "system" | "volume" | "network" | "image" | "container"
            );
            args[..=at].iter().any(|w| w.dynamic) || (destructive && args[at + 1..].iter().any(|w| w.dynamic))
        }
        name => name.starts_with("mkfs"),
    }
}

/// The words of `name`'s command line that it writes to (files, directories it writes into).
pub(super) fn written(name: &str, args: &[Word]) -> Vec<Word> {
    let operands = || wrapper::operands(args).cloned().collect::<Vec<_>>();
    match name {
        "tee" | "rm" | "rmdir" | "unlink" | "shred" | "truncate" | "touch" | "mkdir" | "chmod" | "chown" | "chgrp"
        | "chattr" | "setfacl" | "mv" | "patch" => operands(),
        "cp" | "install" | "ln" | "rsync" | "scp" => {
            let mut targets = values(args, &["-t"], &["--target-directory"]);
            targets.extend(wrapper::operands(args).last().cloned());
            targets
        }
        "sed" | "perl" if in_place(args) => operands(),
        "dd" => args
            .iter()
            .filter_map(|a| a.text.strip_prefix("of=").map(|of| Word { text: of.to_string(), ..a.clone() }))
            .collect(),
        "curl" => values(args, &["-o"], &["--output", "--output-dir"]),
        "wget" => values(args, &["-O", "-P"], &["--output-document", "--directory-prefix"]),
        "tar" => values(args, &["-C"], &["--directory"]),
        "unzip" => values(args, &["-d"], &[]),
        "git" => match wrapper::git_subcommand(args) {
            Some(at) if args[at].text == "clone" => {
                wrapper::operands(&args[at + 1..]).nth(1).cloned().into_iter().collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Whether `name` writes files into its working directory without naming them (`wget URL`,
/// `curl -O`, `git clone URL`, `tar x` and `unzip` without a target directory).
pub(super) fn writes_here(name: &str, args: &[Word]) -> bool {
    let cluster = |a: &Word, flag: char| a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains(flag);
    match name {
        "wget" => values(args, &["-O", "-P"], &["--output-document", "--directory-prefix"]).is_empty(),
        "curl" => {
            args.iter().any(|a| cluster(a, 'O') || a.text.starts_with("--remote-name"))
                && values(args, &[], &["--output-dir"]).is_empty()
        }
        "tar" => {
            let extracts = args.first().is_some_and(|a| !a.text.starts_with("--") && a.text.contains('x'))
                || args.iter().any(|a| a.text == "--extract" || a.text == "--get");
            extracts && values(args, &["-C"], &["--directory"]).is_empty()
        }
        "unzip" => values(args, &["-d"], &[]).is_empty(),
        "git" => wrapper::git_subcommand(args)
            .is_some_and(|at| args[at].text == "clone" && wrapper::operands(&args[at + 1..]).count() < 2),
        _ => false,
    }
}

/// Whether `name` reads every file of the directories it is given: `grep -r`, `tar c`, `zip`.
pub(super) fn reads_everything(name: &str, args: &[Word]) -> bool {
    let flagged = |flags: &str| {
        args.iter()
            .any(|a| a.text.strip_prefix('-').is_some_and(|f| !f.starts_with('-') && f.contains(|c| flags.contains(c))))
    };
    match name {
        "grep" | "egrep" | "fgrep" => {
            flagged("rR")
                || args
                    .iter()
                    .any(|a| a.text.starts_with("--recursive") || a.text.starts_with("--dereference-recursive"))
        }
        "tar" => {
            args.first().is_some_and(|a| !a.text.starts_with("--") && a.text.contains('c'))
                || args.iter().any(|a| a.text == "--create")
        }
        "zip" | "7z" | "strings" => true,
        _ => false,
    }
}

/// The values of the options `short` (`-o FILE`, `-oFILE`) and `long` (`--out FILE`,
/// `--out=FILE`) in `args`.
pub(super) fn values(args: &[Word], short: &[&str], long: &[&str]) -> Vec<Word> {
    let mut out = Vec::new();
    for (at, arg) in args.iter().enumerate() {
        let text = arg.text.as_str();
        let next = || args.get(at + 1).cloned();
        let value = if short.contains(&text) || long.contains(&text) {
            next()
        } else if let Some((_, value)) = text.split_once('=').filter(|(option, _)| long.contains(option)) {
            Some(Word { text: value.to_string(), ..arg.clone() })
        } else {
            short
                .iter()
                .find_map(|s| text.strip_prefix(s).filter(|v| !v.is_empty() && !text.starts_with("--")))
                .map(|v| Word { text: v.to_string(), ..arg.clone() })
        };
        out.extend(value);
    }
    out
}

/// The paths a word may name: itself, what follows `NAME=` (`if=`, `--file=`) and `@` (curl's
/// `-d @file`).
pub(super) fn mentions(text: &str) -> Vec<&str> {
    let mut out = vec![text];
    if let Some((_, value)) = text.split_once('=') {
        out.push(value);
    }
    let at: Vec<&str> = out.iter().filter_map(|t| t.strip_prefix('@')).collect();
    out.extend(at);
    out
}

/// `sed -i`, `sed --in-place`, `perl -pi`: the files are edited where they are.
fn in_place(args: &[Word]) -> bool {
    args.iter().any(|a| {
        a.text.starts_with("--in-place")
            || a.text.strip_prefix('-').is_some_and(|flags| {
                !flags.starts_with('-') && flags.split('.').next().is_some_and(|f| f.contains('i'))
            })
    })
}

/// `rm -r`, `-R`, `-rf`, `--recursive` (before `--`).
pub(super) fn recursive(args: &[Word]) -> bool {
    args.iter().take_while(|a| a.text != "--").any(|a| {
        a.text == "--recursive"
            || a.text.strip_prefix('-').is_some_and(|f| {
                !f.starts_with('-') && f.chars().all(|c| c.is_ascii_alphabetic()) && f.contains(['r', 'R'])
            })
    })
}

/// `find ... -delete` or `find ... -exec rm ...`.
pub(super) fn find_deletes(args: &[Word]) -> bool {
    args.iter().enumerate().any(|(at, a)| {
        a.text == "-delete"
            || (matches!(a.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                && args.get(at + 1).is_some_and(|p| matches!(basename(&p.text), "rm" | "shred" | "unlink" | "rmdir")))
    })
}

/// find's starting points (`.` when none are given).
pub(super) fn find_starts(args: &[Word]) -> Vec<Word> {
    let mut at = 0;
    while let Some(a) = args.get(at) {
        match a.text.as_str() {
            "-H" | "-L" | "-P" => at += 1,
            "-D" => at += 2,
            text if text.starts_with("-O") => at += 1,
            _ => break,
        }
    }
    let starts: Vec<Word> = args[at.min(args.len())..]
        .iter()
        .take_while(|a| !(a.text.starts_with('-') || matches!(a.text.as_str(), "(" | "!" | ")")))
        .cloned()
        .collect();
    if starts.is_empty() {
        vec![Word { text: ".".into(), dynamic: false, unknown: false, glob: false }]
    } else {
        starts
    }
}

/// The commands of find's `-exec`, `-execdir`, `-ok` and `-okdir`, up to their `;` or `+`.
pub(super) fn find_commands(args: &[Word]) -> Vec<&[Word]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < args.len() {
        if matches!(args[at].text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let start = at + 1;
            let end = (start..args.len()).find(|&j| args[j].text == ";" || args[j].text == "+").unwrap_or(args.len());
            out.push(&args[start..end]);
            at = end;
        }
        at += 1;
    }
    out
}
