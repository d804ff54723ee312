//! Deep storage against a model (a `BTreeMap`): on a local directory, and on S3 as
//! served by moto's server, which the test starts.

mod common;

use std::collections::BTreeMap;

use puffer_cluster::{ClusterError, DeepStorage};
use rand::{Rng, SeedableRng};

/// Random puts, gets, lists and deletes, each checked against the model.
fn agrees_with_a_model(storage: &DeepStorage) {
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let names: Vec<String> = (0..12)
        .map(|i| format!("segments/t{}/s{}/{:06}.seg", i % 2, i % 3, i))
        .collect();
    for step in 0..200 {
        let name = &names[rng.gen_range(0..names.len())];
        match rng.gen_range(0..4) {
            0 => {
                let payload: Vec<u8> = (0..rng.gen_range(0..5000)).map(|_| rng.gen()).collect();
                let answer = storage.put(name, &payload);
                match model.get(name) {
                    // Immutable: the same bytes again are fine, other bytes refused.
                    Some(existing) if *existing != payload => {
                        assert!(matches!(answer, Err(ClusterError::Invalid(_))), "{step}")
                    }
                    _ => {
                        answer.unwrap();
                        model.insert(name.clone(), payload);
                    }
                }
            }
            1 => match model.get(name) {
                Some(payload) => {
                    assert_eq!(&storage.get(name).unwrap(), payload, "step {step}");
                    storage.put(name, payload).unwrap();
                }
                None => {
                    let answer = storage.get(name);
                    assert!(
                        matches!(answer, Err(ClusterError::NotFound(_))),
                        "step {step}: {answer:?}"
                    )
                }
            },
            2 => {
                storage.delete(name).unwrap();
                model.remove(name);
            }
            _ => {
                let prefix = ["segments", "segments/t0", "segments/t1/s2"][rng.gen_range(0..3)];
                let expected: Vec<String> = model
                    .keys()
                    .filter(|k| k.starts_with(&format!("{prefix}/")))
                    .cloned()
                    .collect();
                assert_eq!(storage.list(prefix).unwrap(), expected, "step {step}");
            }
        }
    }
    assert_eq!(
        storage.list("").unwrap(),
        model.keys().cloned().collect::<Vec<_>>()
    );
    // Directories go up and come down whole.
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| (format!("part{i}.bin"), vec![i as u8; 1000 * (i + 1)]))
        .collect();
    for (file, bytes) in &files {
        std::fs::write(dir.path().join(file), bytes).unwrap();
    }
    assert_eq!(storage.upload_dir(dir.path(), "dir/a").unwrap(), 6000);
    let back = tempfile::tempdir().unwrap();
    assert_eq!(storage.download_dir("dir/a", back.path()).unwrap(), 6000);
    for (file, bytes) in &files {
        assert_eq!(&std::fs::read(back.path().join(file)).unwrap(), bytes);
    }
    // Bad names are refused before any request.
    for bad in ["", "../x", "a//b"] {
        assert!(matches!(
            storage.put(bad, b"x"),
            Err(ClusterError::Invalid(_))
        ));
    }
}

#[test]
fn a_local_directory_agrees_with_a_model_and_reports_damage() {
    let dir = tempfile::tempdir().unwrap();
    let storage = DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
    agrees_with_a_model(&storage);

    storage.put("log/1", b"an SCU").unwrap();
    let file = dir.path().join("deep/log/1");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let damaged = storage.get("log/1").unwrap_err();
    assert!(matches!(damaged, ClusterError::Corrupt { .. }), "{damaged}");
    std::fs::write(&file, &bytes[..10]).unwrap();
    assert!(matches!(
        storage.get("log/1"),
        Err(ClusterError::Corrupt { .. })
    ));
    // Writing it again replaces the damaged copy.
    storage.put("log/1", b"an SCU").unwrap();
    assert_eq!(storage.get("log/1").unwrap(), b"an SCU");
    // Other schemes are refused with what is accepted.
    let error = DeepStorage::open("gs://bucket").unwrap_err().to_string();
    assert!(error.contains("s3://"), "{error}");
}

#[test]
fn s3_agrees_with_a_model() {
    let Some(moto) = common::moto_or_skip("s3_agrees_with_a_model") else {
        return;
    };
    moto.create_bucket("puffer").unwrap();
    let storage = DeepStorage::open_with("s3://puffer/cluster-a", &moto.settings()).unwrap();
    agrees_with_a_model(&storage);
    // The prefix keeps clusters apart in one bucket.
    let other = DeepStorage::open_with("s3://puffer/cluster-b", &moto.settings()).unwrap();
    assert!(other.list("").unwrap().is_empty());
}
