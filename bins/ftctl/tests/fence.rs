//! `ftctl fence check` as a real process: exit statuses, messages, the
//! record's bytes, and 16 checks at once on one file.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{finish, run, spawn, Outcome};

/// `ftctl fence check --file PATH FENCE`.
async fn check(path: &Path, fence: &str) -> Outcome {
    run(&["fence", "check", "--file", path.to_str().unwrap(), fence]).await
}

fn ok(out: &Outcome) {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn larger_fences_are_recorded_and_others_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    let p = path.display();

    // A missing file is an empty record.
    ok(&check(&path, "5").await);
    assert_eq!(std::fs::read(&path).unwrap(), b"5\n");
    assert!(dir.path().join("fence.lock").is_file(), "the lock file is left in place");
    assert!(!dir.path().join("fence.tmp").exists());

    ok(&check(&path, "7").await);
    assert_eq!(std::fs::read(&path).unwrap(), b"7\n");

    let out = check(&path, "7").await;
    assert_eq!(out.code, 65, "{out:?}");
    assert_eq!(out.stderr, format!("ftctl: stale fence 7 ≤ 7 (the largest recorded in {p}); nothing changed\n"));
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"7\n");

    let out = check(&path, "3").await;
    assert_eq!(out.code, 65, "{out:?}");
    assert_eq!(out.stderr, format!("ftctl: stale fence 3 ≤ 7 (the largest recorded in {p}); nothing changed\n"));
    assert_eq!(std::fs::read(&path).unwrap(), b"7\n");

    // The largest fence there is; then nothing can follow it.
    let max = u128::MAX.to_string();
    ok(&check(&path, &max).await);
    assert_eq!(std::fs::read(&path).unwrap(), format!("{max}\n").as_bytes());
    assert_eq!(check(&path, &max).await.code, 65);

    // An empty file is an empty record too.
    std::fs::write(&path, "").unwrap();
    ok(&check(&path, "0").await);
    assert_eq!(std::fs::read(&path).unwrap(), b"0\n");
}

#[tokio::test]
async fn a_file_that_is_no_record_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    let p = path.display();
    for (content, reason) in [
        (&b"garbage\n"[..], "its line is not a fence: 'g' (byte 0x67) at offset 0 is not a decimal digit"),
        (b"7", "the number is not followed by a newline (a truncated record?)"),
        (b"7\n8\n", "it has more than one line"),
        (b" 7\n", "its line is not a fence: byte 0x20 at offset 0 is not a decimal digit"),
        (b"007\n", "its line is not a fence: it has a leading zero"),
        (&[0u8; 100], "it is longer than any record (40 bytes at most)"),
    ] {
        std::fs::write(&path, content).unwrap();
        let out = check(&path, "9").await;
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(
            out.stderr,
            format!(
                "ftctl: {p} is not a fence record (one decimal number and a newline, as ftctl fence check writes): \
                 {reason}; nothing changed\n"
            )
        );
        assert_eq!(std::fs::read(&path).unwrap(), content, "changed");
    }
}

#[tokio::test]
async fn a_bad_fence_is_a_usage_error_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    for fence in ["x", "+1", "07", "1.5", "", "340282366920938463463374607431768211456"] {
        let out = check(&path, fence).await;
        assert_eq!(out.code, 2, "{fence:?}: {out:?}");
        assert!(out.stderr.contains("invalid value") && out.stderr.contains("<FENCE>"), "{fence:?}: {}", out.stderr);
        assert!(out.stderr.contains("not a fence"), "{fence:?}: {}", out.stderr);
    }
    // A negative number reads as an option to clap: exit 2 too.
    for args in [
        &["fence", "check", "--file", path.to_str().unwrap(), "-1"][..],
        &["fence", "check", "--file", path.to_str().unwrap()],
    ] {
        let out = run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "files were created");
}

#[tokio::test]
async fn paths_that_cannot_hold_a_record_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();

    let out = check(&dir.path().join("nowhere/fence"), "1").await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "ftctl: cannot create the lock file {d}/nowhere/fence.lock: the directory {d}/nowhere does not exist\n"
        )
    );

    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = check(&sub, "1").await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stderr, format!("ftctl: {d}/sub is a directory, not a fence record; nothing changed\n"));

    let out = check(&dir.path().join("sub/"), "1").await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("names no file"), "{out:?}");

    // A record in a directory that is a file.
    std::fs::write(dir.path().join("plain"), "").unwrap();
    let out = check(&dir.path().join("plain/fence"), "1").await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with(&format!("ftctl: cannot look up {d}/plain/fence: ")), "{out:?}");

    // Nothing was made beside them.
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["plain", "sub"]);
}

/// Fence of the `i`th of 16 processes (1..=16, in a scrambled order so
/// that start order is not fence order).
fn scrambled(i: u128) -> u128 {
    (i * 7) % 16 + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_checks_at_once_behave_as_one_at_a_time() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence");
        let path_str = path.to_str().unwrap().to_string();
        let fences: Vec<u128> = (0..16).map(|i| if round == 0 { i + 1 } else { scrambled(i + round) }).collect();
        let texts: Vec<String> = fences.iter().map(u128::to_string).collect();
        let children: Vec<_> =
            texts.iter().map(|f| spawn(&["fence", "check", "--file", &path_str, f.as_str()])).collect();
        let mut outcomes = Vec::new();
        for (child, fence) in children.into_iter().zip(&fences) {
            outcomes.push((*fence, finish(child, Duration::from_secs(30)).await));
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"16\n", "round {round}: {outcomes:#?}");

        let accepted: Vec<u128> = outcomes.iter().filter(|(_, o)| o.code == 0).map(|(f, _)| *f).collect();
        assert!(accepted.contains(&16), "round {round}: 16 refused: {outcomes:#?}");
        for (fence, out) in &outcomes {
            match out.code {
                0 => assert!(out.stderr.is_empty(), "{out:?}"),
                65 => {
                    // `ftctl: stale fence F ≤ G (…)`: G was the record at
                    // the time, so it is a fence some process was told it
                    // had recorded, and F ≤ G.
                    let rest =
                        out.stderr.strip_prefix(&format!("ftctl: stale fence {fence} ≤ ")).unwrap_or_else(|| {
                            panic!("round {round}, fence {fence}: {out:?}");
                        });
                    let g: u128 = rest.split(' ').next().unwrap().parse().unwrap();
                    assert!(g >= *fence, "round {round}: fence {fence} refused with a smaller record {g}");
                    assert!(accepted.contains(&g), "round {round}: record {g} was never accepted: {outcomes:#?}");
                }
                _ => panic!("round {round}, fence {fence}: {out:?}"),
            }
        }
        // So there is an order of the 16 that explains every answer: the
        // accepted fences increasing, each refusal right after the
        // acceptance of the G it names. (Which of two acceptances came
        // first is not visible from outside; that each check waits for
        // the lock is tested on its own below.)
        assert!(!dir.path().join("fence.tmp").exists(), "round {round}: a temporary file was left");
    }
}

#[tokio::test]
async fn a_check_waits_for_the_lock_on_path_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    std::fs::write(&path, "3\n").unwrap();
    let lock = std::fs::File::create(dir.path().join("fence.lock")).unwrap();
    lock.lock().unwrap();
    let child = spawn(&["fence", "check", "--file", path.to_str().unwrap(), "4"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(std::fs::read(&path).unwrap(), b"3\n", "written while another held the lock");
    assert!(!dir.path().join("fence.tmp").exists(), "started writing while another held the lock");
    lock.unlock().unwrap();
    let out = finish(child, Duration::from_secs(20)).await;
    ok(&out);
    assert_eq!(std::fs::read(&path).unwrap(), b"4\n");
}
