//! The corpus: several hundred commands, safe and dangerous, each with the verdict it must get.
//! The format is described at the top of `corpus.txt`.

use super::{CommandPolicy, Verdict, check};

const CORPUS: &str = include_str!("corpus.txt");

/// What a corpus line expects.
#[derive(Debug)]
enum Expected<'c> {
    Safe,
    Ask(&'c str),
    Refuse(&'c str),
}

impl Expected<'_> {
    fn matches(&self, verdict: &Verdict) -> bool {
        match (self, verdict) {
            (Expected::Safe, Verdict::Safe) => true,
            (Expected::Ask(key), Verdict::Dangerous { key: got, .. }) => key == got,
            (Expected::Refuse(fragment), Verdict::Forbidden { reason }) => reason.contains(fragment),
            (Expected::Safe | Expected::Ask(_) | Expected::Refuse(_), _) => false,
        }
    }
}

/// The corpus's cases: (line number, expectation, command).
fn cases() -> Vec<(usize, Expected<'static>, String)> {
    CORPUS
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|(at, line)| {
            let number = at + 1;
            let fields: Vec<&str> = line.splitn(3, '\t').collect();
            let [verdict, expected, command] = fields.as_slice() else {
                panic!("corpus.txt:{number}: expected VERDICT<TAB>EXPECTED<TAB>COMMAND, got {line:?}")
            };
            let expected = match *verdict {
                "safe" => Expected::Safe,
                "ask" => Expected::Ask(expected),
                "refuse" => Expected::Refuse(expected),
                other => panic!("corpus.txt:{number}: unknown verdict {other:?} (safe, ask or refuse)"),
            };
            (number, expected, command.replace('↵', "\n"))
        })
        .collect()
}

#[test]
fn every_line_gets_its_verdict() {
    let policy = CommandPolicy { home: Some("/srv/tal".into()), ..CommandPolicy::default() };
    let cases = cases();
    assert!(cases.len() >= 200, "the corpus should hold at least 200 commands, it holds {}", cases.len());
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|(number, expected, command)| {
            let verdict = check(command, &policy);
            (!expected.matches(&verdict)).then(|| {
                format!("corpus.txt:{number}: {command:?}\n    expected {expected:?}\n    got      {verdict:?}")
            })
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} corpus lines got another verdict:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

/// The keys of the findings made in code rather than by rows.
const CODE_KEYS: &[&str] = &[
    "rm-root",
    "rm-dynamic-dir",
    "dynamic-command",
    "dynamic-arguments",
    "read-secrets",
    "write-etc",
    "write-ssh",
    "write-startup",
    "write-talaria",
    "write-git",
    "write-project",
];

#[test]
fn the_corpus_covers_safe_and_every_dangerous_family() {
    let cases = cases();
    let safe = cases.iter().filter(|(_, e, _)| matches!(e, Expected::Safe)).count();
    assert!(safe >= 100, "only {safe} safe commands");
    let dangerous_rows =
        super::rules::ROWS.iter().map(|row| row.key).filter(|key| !matches!(*key, "fork-bomb" | "disk-write"));
    for key in dangerous_rows.chain(CODE_KEYS.iter().copied()) {
        let asked = cases.iter().filter(|(_, e, _)| matches!(e, Expected::Ask(k) if *k == key)).count();
        assert!(asked >= 2, "the corpus asks with key {key} {asked} times; give each family several spellings");
    }
}

#[test]
fn in_the_sandbox_the_corpus_asks_only_about_what_the_sandbox_lets_happen() {
    use super::{ENFORCED_BY_SANDBOX, check_confined};
    let policy = CommandPolicy { home: Some("/srv/tal".into()), ..CommandPolicy::default() };
    let (mut asked_before, mut asked_after) = (0, 0);
    let mut wrong = Vec::new();
    for (number, expected, command) in cases() {
        let confined = check_confined(&command, &policy);
        let fits = match (&expected, &confined) {
            // Safe stays safe, refused stays refused.
            (Expected::Safe, Verdict::Safe) | (Expected::Refuse(_), Verdict::Forbidden { .. }) => true,
            // A question the sandbox answers goes, or leaves another finding's question.
            (Expected::Ask(key), Verdict::Safe) => ENFORCED_BY_SANDBOX.contains(key),
            (Expected::Ask(key), Verdict::Dangerous { key: got, .. }) => {
                got == key || (ENFORCED_BY_SANDBOX.contains(key) && !ENFORCED_BY_SANDBOX.contains(got))
            }
            _ => false,
        };
        if !fits {
            wrong.push(format!("corpus.txt:{number}: {command:?}: {expected:?} became {confined:?}"));
        }
        asked_before += usize::from(matches!(expected, Expected::Ask(_)));
        asked_after += usize::from(matches!(confined, Verdict::Dangerous { .. }));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(asked_after < asked_before, "{asked_after} of {asked_before} still ask");
    // What the sandbox does not stop still asks: the workspace, its history, its remotes.
    for (command, key) in [
        ("rm -rf .", "rm-recursive"),
        ("rm -rf src", "rm-recursive"),
        ("git push --force origin main", "git-force-push"),
        ("git reset --hard HEAD~3", "git-reset-hard"),
        ("echo 'evil' >> ~/.bashrc", "write-startup"),
    ] {
        assert!(
            matches!(check_confined(command, &policy), Verdict::Dangerous { key: k, .. } if k == key),
            "{command}: {:?}",
            check_confined(command, &policy)
        );
    }
    // What it does stop no longer asks.
    for command in
        ["cat ~/.talaria/.env", "python3 -c 'print(1)'", "sh -c 'make test'", "echo x > /etc/hosts", "kill -9 -1"]
    {
        assert_eq!(check_confined(command, &policy), Verdict::Safe, "{command}");
    }
}
