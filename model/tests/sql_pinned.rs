//! The statements the database mirror (`src/db.rs`) stands for, pinned by digest: a
//! change to one of them fails here until the mirror is checked against it and
//! `MIRRORED` updated (`docs/model.md#keeping-the-mirror-honest`). The text is read
//! from the lease-store's sources, so the model does not depend on its crate.

use keyflight_model::db::MIRRORED;
use sha2::{Digest, Sha256};

fn source(file: &str) -> &'static str {
    match file {
        "claim.rs" => include_str!("../../store-core/src/sql/claim.rs"),
        "lease.rs" => include_str!("../../store-core/src/sql/lease.rs"),
        "retention.rs" => include_str!("../../store-core/src/sql/retention.rs"),
        "orphan.rs" => include_str!("../../store-core/src/sql/orphan.rs"),
        "held.rs" => include_str!("../../store-core/src/sql/held.rs"),
        "reconciled.rs" => include_str!("../../store-core/src/sql/reconciled.rs"),
        other => panic!("no source {other}"),
    }
}

/// The source text of constant (or macro) `name`: from its definition to its end.
fn definition<'a>(text: &'a str, name: &str) -> &'a str {
    let (start, end) = if name.ends_with("_SQL") {
        let start = text
            .find(&format!("const {name}: &str = "))
            .unwrap_or_else(|| panic!("{name} is gone"));
        let rest = &text[start..];
        let end = if rest.contains("concat!(") && rest.find("concat!(") < rest.find("\";") {
            rest.find("\n);").map(|i| i + 3)
        } else {
            rest.find("\";").map(|i| i + 2)
        };
        (
            start,
            start + end.unwrap_or_else(|| panic!("{name} has no end")),
        )
    } else {
        let start = text
            .find(&format!("macro_rules! {name}"))
            .unwrap_or_else(|| panic!("{name} is gone"));
        let end = text[start..].find("\n}\n").map(|i| i + 2);
        (
            start,
            start + end.unwrap_or_else(|| panic!("{name} has no end")),
        )
    };
    &text[start..end]
}

#[test]
fn every_mirrored_statement_is_the_one_the_model_was_checked_against() {
    let mut changed = Vec::new();
    for (file, name, pinned) in MIRRORED {
        let digest = hex::encode(Sha256::digest(definition(source(file), name).as_bytes()));
        if digest != pinned {
            changed.push(format!("    (\"{file}\", \"{name}\", \"{digest}\"),"));
        }
    }
    assert!(
        changed.is_empty(),
        "statements changed since the model mirrored them: check model/src/db.rs against \
         them, then pin:\n{}",
        changed.join("\n")
    );
}
