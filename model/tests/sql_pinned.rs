//! Every statement the store runs (`keyflight_store_core::sql::STATEMENTS`), pinned by the
//! SHA-256 of its value: a statement added without a pin, or changed without updating it,
//! fails here. Those the database mirror stands for (`MIRRORED`, `src/db.rs`) are pinned
//! only once the mirror matches them again (`docs/model.md#keeping-the-mirror-honest`).

use keyflight_model::db::MIRRORED;
use keyflight_store_core::sql::STATEMENTS;
use sha2::{Digest, Sha256};

/// Each statement's path under `keyflight_store_core::sql` and the SHA-256 of its value.
const PINNED: [(&str, &str); 46] = [
    (
        "batch::CLAIM_BATCH_SQL",
        "b27e7aebe99621ea4a12de3b699076f925ae38caeda5dc9a44322590a6b2a2ac",
    ),
    (
        "batch::FINALIZE_BATCH_SQL",
        "1fc1b0469628976cc91e120c1f9e685e963a2e4c2ae52aa17db75ea41b1cccf6",
    ),
    (
        "claim::CLAIM_SQL",
        "41c02decd647ac9c5a4817c3f95de452beb064c33128452fc7a079dc296cba2a",
    ),
    (
        "claim::HOLD_LAPSED_SQL",
        "9d73c04cec8362ba15b3b2f5b185204202b8ff77eb33ec70eef15a283ef002eb",
    ),
    (
        "claim::READ_SQL",
        "b4bd48929a69fdccada4a80c701a296d3ad20cf29418b7da9737a242ca17cb9a",
    ),
    (
        "dual::BOTH_HELD_SQL",
        "1a4ea73ccfd352001ec40f4fa3715f71446c4d5626e1fbd946be90dcf921d73b",
    ),
    (
        "dual::HOLD_FOR_SETTLE_SQL",
        "87da552a21cd4fcda6e1fb3b23b7ac84d7030d175797f11098980b73fa803e4e",
    ),
    (
        "dual::NONE_TAKEN_SQL",
        "434a7893279409881291ed8f187e6cb295a66ed28fccad21870ef763354e4cec",
    ),
    (
        "epoch::EPOCH_ROUTER_SQL",
        "cd541550957f0d395910e6cca402526c8698eed5020b96d2b212f640e690a6fc",
    ),
    (
        "epoch::EPOCH_SQL",
        "2cb1995ac4033cb73316d082cf7eb56da5ece72172de7db8c9f0fc45889bd46f",
    ),
    (
        "held::HOLD_ABANDONED_SQL",
        "e8c03beaefa7c38ec0d461bbc044299c7433ba27a32c276ff601d49a3d32c189",
    ),
    (
        "lease::FINALIZE_SQL",
        "3a991920e4f11745a73aa3efa1666a98c2386ab972cfd72d20080ad199845e64",
    ),
    (
        "lease::OWNER_SQL",
        "5d5add8c92e1258e458edb9a8e269ed3e8c01a58e6a9bda111cfd61d5d760550",
    ),
    (
        "lease::RELEASE_COOLDOWN_SQL",
        "97196771bf37474f7e6301411d2fabd00ab1b0d9777558fd38b37709c2062c21",
    ),
    (
        "lease::RELEASE_FORGET_SQL",
        "eb07cf3f2f6c63517a160886fe41a3c83f5132351906f5f7ed8e8c1022659843",
    ),
    (
        "lease::RELEASE_UNKNOWN_SQL",
        "0808e261233b3c2786f9cc99157cda1319ef8f36e172f41082b1db8957e75445",
    ),
    (
        "lease::RENEW_SQL",
        "659c5fa6f95a5296787e5a6399f4a5be370bed36e71266f883f5901f0ad5a679",
    ),
    (
        "listener::LIVENESS_SQL",
        "ef57ddb88af8fbc5f37918ffb74cbdbf99413cbc986278d5267ee3b6a40dab9b",
    ),
    (
        "migrate::TABLE_EXISTS_SQL",
        "faa38ce8141f28dd6ff207e7fc27fa4c5ce6607bfe5de5487e0c5796bbe70d65",
    ),
    (
        "orphan::GIVE_BACK_SQL",
        "b4df5c6525a38dc37fc31351e9fb858e113008a259f27cf8a61435995027fed1",
    ),
    (
        "orphan::RELEASE_ORPHAN_SQL",
        "650c00878e23795482f26770d6910a2bb5f53cccbc5c57b1905f36da603f43ee",
    ),
    (
        "partitions::CLUSTER_OPTIONS_SQL",
        "b530b289327ba8e77fbe661f0d2c2a7d10a31ddb8fbc3f2ae09c7ed46ddc14a2",
    ),
    (
        "partitions::FENCE_INCREMENT_SQL",
        "f43e2181899f1550ea34b1197dc09f8673e1ecc0ac3305e5fb1523becabe3e80",
    ),
    (
        "partitions::IS_ROUTER_SQL",
        "a6d12ba02d2883447a00f426ff38f1917be2c55c1c45c051685b829b440078f3",
    ),
    (
        "partitions::LAST_FENCE_SQL",
        "b24ed61f21fa480613f86898c86732e47bf809143134e912f88c0220f4481bb3",
    ),
    (
        "partitions::ROUTER_SCHEMA_SQL",
        "ec17e75bb1f0294a7f6a0d42e8a2b72bf6fb26c01038cd76caa9fda79993583d",
    ),
    (
        "partitions::ROUTER_SQL",
        "d8bb50a9eac78ccc37bac126751113de7c8bba179d2a93d0cff82fdc02bc0fae",
    ),
    (
        "privilege::CURRENT_USER_SQL",
        "e3e4c413fce8753db132b245d90630657bd9eedd390b945007e41120e12fd5d9",
    ),
    (
        "privilege::EXCESS_PRIVILEGES_SQL",
        "5d86c5c089cf34f7312b1a5b4c818e6f8c97f9ae61c1bb0e0437974e75c63e62",
    ),
    (
        "privilege::FUNCTIONS_OWNED_SQL",
        "06ed75d129165b0659de2b368315c865759b1583a875f609414c5c791107ac75",
    ),
    (
        "privilege::MISSING_GRANTS_SQL",
        "e9c5cfde3dcb920399338f631babbe92d74ac938ea910165126d9a2862d4795c",
    ),
    (
        "privilege::ROUTER_EXCESS_SQL",
        "a014f8be70440fafd2ee491445b65b0d3ce623c63951a44cccfa91c1a686c2b9",
    ),
    (
        "privilege::SCHEMA_SQL",
        "3cb8d6d0b7a109dad270a06a0b7e0e8c6ffb9243582781f9d47c2abc5286fbad",
    ),
    (
        "reconciled::RECONCILED_ABSENT_SQL",
        "49776ace4e075f1be193e23b2b722bb08de669cd67b15c71e3b2b3a8c740f222",
    ),
    (
        "reconciled::RECONCILED_COMMITTED_SQL",
        "4c97a511bedf9ae00970a08073728d29a9fa4acb47a6281a77123253043e0dfc",
    ),
    (
        "records::AUDIT_SQL",
        "38e976b5ba707617547e5f3ed922666ef12089ac7ed7b38e25c6e9c98a2370d2",
    ),
    (
        "records::ERASE_SQL",
        "2d8e4595838c8d319b5bba43582d738498ce59adcacfac826492a8ac70fff1fc",
    ),
    (
        "records::GET_SQL",
        "1941a700f1a85944c69da1258d9ca77f75b989d5d72f7d9d342d424d1c44e94e",
    ),
    (
        "records::LIST_ROUTER_SQL",
        "8eb8399b991b5ad214a733ec3e3cdd8ce3a903023b99bad9f6721adc0f4930b0",
    ),
    (
        "records::LIST_SQL",
        "9351602b209e72a8d610c7688faafc03a37b3b99aa6f5ef20bbe56ab3095c83a",
    ),
    (
        "records::RESOLVE_COMPLETED_SQL",
        "c5cca34665ef0b3c6568a0d9bfec0bdd701d96a16d1e10451ee640083a8d3177",
    ),
    (
        "records::RESOLVE_FAILED_SQL",
        "7781bd3f0a75120293378ce243a4d4da4e2306f667f56df29d233b5c1acf0dcc",
    ),
    (
        "retention::DELETE_EXPIRED_SQL",
        "1d23337751aee65bbbcbef3433491cec4b13eac013465dad2b30aa56be4f1761",
    ),
    (
        "usage::WORKLOAD_USAGE_ROUTER_SQL",
        "5bd22a6275196fd29eed645976734ce171a9e26a267313e27db820fb7ac7c621",
    ),
    (
        "usage::WORKLOAD_USAGE_SQL",
        "d3d332c724f7662b6b358b5c8dbbef30f66727d0ff8c4a8140b4e14426c50e94",
    ),
    (
        "watch::WATCH_SQL",
        "9ae20dac2f9b59ecb894e53a83f460bd7e9a87a2921d9f8b1146c92fd0d3ed12",
    ),
];

#[test]
fn every_statement_the_store_runs_is_pinned_by_value() {
    let mut table = Vec::new();
    let mut wrong = Vec::new();
    for (name, sql) in STATEMENTS {
        let digest = hex::encode(Sha256::digest(sql.as_bytes()));
        table.push(format!("    (\"{name}\", \"{digest}\"),"));
        match PINNED.iter().find(|(pinned, _)| *pinned == name) {
            Some((_, pin)) if *pin == digest => {}
            Some(_) if MIRRORED.contains(&name) => {
                wrong.push(format!("{name} changed: check model/src/db.rs against it"));
            }
            Some(_) => wrong.push(format!("{name} changed")),
            None => wrong.push(format!("{name} has no pin")),
        }
    }
    for (pinned, _) in PINNED {
        if !STATEMENTS.iter().any(|(name, _)| *name == pinned) {
            wrong.push(format!("{pinned} is pinned but no longer a statement"));
        }
    }
    for mirrored in MIRRORED {
        if !STATEMENTS.iter().any(|(name, _)| *name == mirrored) {
            wrong.push(format!("the mirrored {mirrored} is no longer a statement"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nonce the model mirrors them, pin:\n{}",
        wrong.join("\n"),
        table.join("\n")
    );
}
