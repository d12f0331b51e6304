//! `ftctl status` against a real hbringd cluster, and against nothing.

mod common;

use common::{dead_addr, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_a_real_daemons_report() {
    let cluster = ftlab::Cluster::start("hbringd", 3, "").unwrap();
    let addr = cluster.node(2).client.to_string();

    let out = run(&["--addr", &addr, "status"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("daemon:      hbringd"), "{}", out.stdout);
    assert!(out.stdout.contains("node:        2"), "{}", out.stdout);
    assert!(out.stdout.contains("peers:"), "{}", out.stdout);
    for id in [1, 3] {
        let peer = cluster.node(id).peer.to_string();
        assert!(out.stdout.contains(&peer), "peer {peer} missing:\n{}", out.stdout);
    }

    let out = run(&["status", "--json", "--addr", &addr]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let json = out.stdout.trim();
    assert!(json.starts_with("{\"daemon\":\"hbringd\",\"node\":2,\"incarnation\":"), "{json}");
    assert!(json.ends_with('}') && json.lines().count() == 1, "{json}");
    for key in ["\"role\":", "\"peers\":[{\"id\":1,", "\"up\":", "\"details\":{"] {
        assert!(json.contains(key), "{key} missing: {json}");
    }
}

#[tokio::test]
async fn status_reads_the_address_from_ftctl_addr() {
    let cluster = ftlab::Cluster::start("hbringd", 3, "").unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ftctl"))
        .arg("status")
        .env("FTCTL_ADDR", cluster.node(1).client.to_string())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("daemon:      hbringd"), "{out:?}");
}

#[tokio::test]
async fn connection_refused_says_what_to_do() {
    let addr = dead_addr();
    for args in [
        vec!["--addr", &addr, "status"],
        vec!["--addr", &addr, "lock", "--", "true"],
        vec!["--addr", &addr, "lock", "db", "--", "true"],
        vec!["--addr", &addr, "locks"],
        vec!["--addr", &addr, "lookup"],
        vec!["--addr", &addr, "exec", "echo", "x"],
        vec!["exec", "--on", &addr, "echo", "x"],
    ] {
        let out = run(&args).await;
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        let expected =
            format!("cannot connect to {addr}: Connection refused (is the daemon running? set --addr or FTCTL_ADDR)");
        assert!(out.stderr.contains(&expected), "{}", out.stderr);
    }
}

#[tokio::test]
async fn bad_addresses_and_durations_are_usage_errors() {
    let out = run(&["--addr", "nowhere", "status"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("expected HOST:PORT"), "{}", out.stderr);

    let out = run(&["lock", "--timeout", "30", "--", "true"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("no unit"), "{}", out.stderr);

    let out = run(&["lock"]).await;
    assert_eq!(out.code, 2, "{out:?}");

    let out = run(&["exec"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    for args in [&["exec", "--timeout", "0", "echo"][..], &["lookup", "--timeout", "0"]] {
        let out = run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains("must be above 0"), "{}", out.stderr);
    }
    let out = run(&["exec", "--request-id", "x", "echo"]).await;
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test]
async fn help_documents_the_exit_statuses() {
    let out = run(&["lock", "--help"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for needle in
        ["75", "69", "130", "143", "CMD's status", "FTCOORD_FENCE", "FTCOORD_LOCK_NAME", "[NAME]", "--timeout"]
    {
        assert!(out.stdout.contains(needle), "lock --help lacks {needle}:\n{}", out.stdout);
    }
    let out = run(&["exec", "--help"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for needle in
        ["SERVICE's status", "64", "75", "126", "token_lost", "--request-id", "--on", "up to 5 times 100 ms apart"]
    {
        assert!(out.stdout.contains(needle), "exec --help lacks {needle}:\n{}", out.stdout);
    }
    let out = run(&["lookup", "--help"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Exit status") && out.stdout.contains("replica 3 127.0.0.1:7803 load 0"));
    let out = run(&["locks", "--help"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for needle in ["Exit status", "locks known", "\"held_fence\""] {
        assert!(out.stdout.contains(needle), "locks --help lacks {needle}:\n{}", out.stdout);
    }
    let out = run(&["status", "--help"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Exit status"), "{}", out.stdout);
}
