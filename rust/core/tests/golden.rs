//! Golden cases generated from the reference implementation (`tests/fixtures/core/*.json` at
//! the repository root).

use std::path::PathBuf;

use promptweave_core::{Entries, safe_format};
use serde::Deserialize;

/// One `safe_format` case: the template, the row as ordered `(key, str(value))` pairs, and what
/// the reference returned.
#[derive(Debug, Deserialize)]
struct SafeFormatCase {
    template: String,
    entries: Vec<(String, String)>,
    expected: String,
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/core")
}

fn load<T: serde::de::DeserializeOwned>(name: &str) -> Result<T, String> {
    let path = fixture_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read fixture {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("cannot parse fixture {}: {e}", path.display()))
}

#[test]
fn safe_format_matches_reference() -> Result<(), String> {
    let cases: Vec<SafeFormatCase> = load("safe_format.json")?;
    assert!(
        cases.len() >= 50,
        "safe_format.json has only {} cases (expected at least 50)",
        cases.len()
    );
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut row = Entries::with_capacity(case.entries.len());
        for (k, v) in &case.entries {
            row.push(k, v);
        }
        let got = safe_format(&case.template, &row);
        if got != case.expected.as_str() {
            failures.push(format!(
                "case #{i}: template={:?} entries={:?}\n  expected={:?}\n  got     ={:?}",
                case.template, case.entries, case.expected, got
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} safe_format cases differ from the reference:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Ok(())
}

/// Every fixture file in the directory must be valid JSON, so that a truncated or hand-broken
/// fixture is noticed even before a dedicated test reads it.
#[test]
fn all_core_fixtures_parse() -> Result<(), String> {
    let dir = fixture_dir();
    let mut seen = 0;
    let listing = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in listing {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
            seen += 1;
        }
    }
    assert!(seen >= 1, "no fixture in {}", dir.display());
    Ok(())
}
