//! How many questions the dangerous-command check asks, unconfined and in the OS sandbox:
//! over the classifier's corpus (safe, dangerous and forbidden commands) and over a list of
//! everyday commands a coding agent runs. Prints the counts and the commands that stop asking.
//!
//! `cargo bench -p talaria-danger --bench prompts`

use talaria_danger::{CommandPolicy, Verdict, check, check_confined};

const CORPUS: &str = include_str!("../src/corpus.txt");

/// What an agent runs on an ordinary day of coding.
const EVERYDAY: &[&str] = &[
    "cargo build",
    "cargo test --workspace",
    "cargo clippy --all-targets -- -D warnings",
    "git status --short",
    "git diff HEAD~1 -- src/",
    "git log --oneline | head -20",
    "git add -A && git commit -m 'fix: parse empty input'",
    "git checkout -b topic",
    "git stash && git pull --rebase && git stash pop",
    "ls -la",
    "grep -rn 'fn parse' src/",
    "rg TODO --type rust",
    "find . -name '*.rs' | xargs wc -l",
    "wc -l $(git ls-files '*.py')",
    "cat $(ls -t logs/*.log | head -1)",
    "python3 -c 'import sys; print(sys.version)'",
    "python3 -c \"import json; print(json.load(open('package.json'))['version'])\"",
    "python3 -m pytest -q",
    "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
    "pip install requests",
    "node -e 'console.log(process.versions.node)'",
    "node -e \"const p=require('./package.json'); console.log(p.scripts)\"",
    "npm install",
    "npm run build",
    "npx prettier --check src",
    "bash -c 'cd web && npm test'",
    "sh -c 'for f in *.md; do echo $f; done'",
    "make -j2",
    "./configure --prefix=$HOME/.local && make",
    "curl -sSfL https://sh.rustup.rs | sh -s -- -y",
    "curl -s https://api.github.com/repos/rust-lang/rust | jq .stargazers_count",
    "wget -qO- https://example.com/install.sh | bash",
    "echo $PATH",
    "env | sort",
    "printenv HOME",
    "ps aux | grep node",
    "pkill -f 'npm run dev'",
    "killall node",
    "kill -9 $(lsof -t -i :3000)",
    "docker ps",
    "systemctl status nginx",
    "crontab -l",
    "cat /etc/os-release",
    "uname -a",
    "df -h .",
    "tar xzf vendor.tar.gz",
    "unzip -o assets.zip -d assets",
    "sed -i 's/old_name/new_name/g' src/*.rs",
    "chmod +x scripts/release.sh && ./scripts/release.sh --dry-run",
    "rm -rf target",
    "rm -rf node_modules && npm ci",
    "rm build/*.o",
    "mkdir -p out && cp -r assets out/",
    "eval \"$(direnv export bash)\"",
    "$EDITOR notes.md",
    "xargs -n1 echo < list.txt",
    "git push --force origin topic",
    "git reset --hard origin/main",
    "git clean -fdx",
    "cat ~/.ssh/config",
    "cat .env",
    "source .venv/bin/activate && pytest",
];

fn asks(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Dangerous { .. })
}

fn main() {
    let policy = CommandPolicy { home: Some("/home/me/.talaria".into()), ..CommandPolicy::default() };
    let corpus: Vec<(String, String)> = CORPUS
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let (verdict, _, command) = (f.next()?, f.next()?, f.next()?);
            Some((verdict.to_string(), command.replace('↵', "\n")))
        })
        .collect();
    let count = |commands: &[&str], confined: bool| {
        commands.iter().filter(|c| asks(&if confined { check_confined(c, &policy) } else { check(c, &policy) })).count()
    };
    let all: Vec<&str> = corpus.iter().map(|(_, c)| c.as_str()).collect();
    let safe: Vec<&str> = corpus.iter().filter(|(v, _)| v == "safe").map(|(_, c)| c.as_str()).collect();
    let refused = |confined: bool| {
        all.iter()
            .filter(|c| {
                matches!(
                    if confined { check_confined(c, &policy) } else { check(c, &policy) },
                    Verdict::Forbidden { .. }
                )
            })
            .count()
    };
    println!("questions asked before a command runs (dangerous-command check):");
    println!("{:<46} {:>10} {:>12}", "", "unconfined", "in sandbox");
    println!(
        "{:<46} {:>10} {:>12}",
        format!("corpus, all {} commands", all.len()),
        count(&all, false),
        count(&all, true)
    );
    println!(
        "{:<46} {:>10} {:>12}",
        format!("corpus, its {} safe commands", safe.len()),
        count(&safe, false),
        count(&safe, true)
    );
    println!(
        "{:<46} {:>10} {:>12}",
        format!("everyday commands ({})", EVERYDAY.len()),
        count(EVERYDAY, false),
        count(EVERYDAY, true)
    );
    println!("{:<46} {:>10} {:>12}", "corpus commands refused outright", refused(false), refused(true));
    println!("\neveryday commands that no longer ask in the sandbox (it bounds them instead):");
    for c in EVERYDAY {
        if let Verdict::Dangerous { key, .. } = check(c, &policy)
            && !asks(&check_confined(c, &policy))
        {
            println!("  {c:<60} was {key}");
        }
    }
    println!("\neveryday commands that still ask (what the sandbox lets happen):");
    for c in EVERYDAY {
        if let Verdict::Dangerous { key, .. } = check_confined(c, &policy) {
            println!("  {c:<60} {key}");
        }
    }
}
