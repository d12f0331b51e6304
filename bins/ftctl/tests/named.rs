//! `ftctl lock NAME` and `ftctl locks` against a real daemon that serves
//! one unnamed lock (ntmutexd: named locks not yet implemented there). The
//! daemon must have been built (`cargo build --workspace --bins`).

mod common;

use common::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_serving_one_lock_refuses_a_name_and_lists_its_one_lock() {
    let cluster = ftlab::Cluster::start("ntmutexd", 3, "").unwrap();
    let addr = cluster.node(1).client.to_string();

    // The unnamed lock works as before, with an empty FTCOORD_LOCK_NAME.
    let out =
        run(&["--addr", &addr, "lock", "--timeout", "10s", "--", "sh", "-c", "echo \"[$FTCOORD_LOCK_NAME]\""]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "[]\n", "{out:?}");

    // A name is refused, changing nothing: exit 2 with the daemon's reason.
    let out = run(&["--addr", &addr, "lock", "jobs", "--timeout", "1s", "--", "true"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("lock `jobs` refused: "), "{}", out.stderr);
    assert!(out.stderr.contains("named locks are not supported"), "{}", out.stderr);

    // Its one lock, not held, nobody waiting.
    let out = run(&["--addr", &addr, "locks"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[0].starts_with("NAME "), "{}", out.stdout);
    assert!(lines[1].starts_with("(unnamed)  no "), "{}", out.stdout);
    assert_eq!(lines[2], "1 lock known");

    let out = run(&["--addr", &addr, "--json", "locks"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with("{\"known\":1,\"listed\":1,\"locks\":[{\"name\":\"\",\"held\":false,\"held_fence\":null,"),
        "{}",
        out.stdout
    );
}
