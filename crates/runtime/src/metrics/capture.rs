//! For tests: what a daemon's metrics mapping records, checked against
//! the tables it declares. Each daemon's unit test drives one event of
//! each kind through its mapping inside [`recorded`], then calls
//! [`assert_declared_and_recorded`].

use std::collections::BTreeSet;
use std::sync::Mutex;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use super::{Kind, Metrics, COMMON};

/// One metric as recorded: full name, kind, label names.
pub type Recorded = (String, Kind, Vec<String>);

/// Notes every metric registered; records nothing.
#[derive(Default)]
struct Capture(Mutex<BTreeSet<Recorded>>);

impl Capture {
    fn note(&self, key: &Key, kind: Kind) {
        let labels = key.labels().map(|l| l.key().to_owned()).collect();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert((key.name().to_owned(), kind, labels));
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.note(key, Kind::Counter);
        Counter::noop()
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.note(key, Kind::Gauge);
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.note(key, Kind::Histogram);
        Histogram::noop()
    }
}

/// Every metric registered on this thread while `f` runs.
pub fn recorded(f: impl FnOnce()) -> BTreeSet<Recorded> {
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, f);
    capture.0.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// A daemon's whole check: `declare` registers what it registers at
/// start; then every event of `events` goes through `record`, and the
/// core's `gauges` are set as the driver sets them; panics as
/// [`assert_declared_and_recorded`] does.
#[track_caller]
pub fn assert_daemon_tables<E>(
    prefix: &'static str,
    declare: impl FnOnce(&Metrics),
    record: impl Fn(&E, &Metrics),
    events: &[E],
    gauges: &[(&'static str, f64)],
) {
    let m = Metrics::detached(prefix);
    let at_start = recorded(|| declare(&m));
    let by_events = recorded(|| {
        for e in events {
            record(e, &m);
        }
        for &(name, value) in gauges {
            m.gauge(name, &[]).set(value);
        }
    });
    assert_declared_and_recorded(&m, &at_start, &by_events);
}

/// Panics unless every metric in `at_start` (what the daemon's `declare`
/// registered) and in `by_events` (what its event mapping and the core's
/// gauges registered) is declared by `m`, by name, kind and label names;
/// and unless every metric `m` declared, but the [`COMMON`] ones the
/// runtime records, is in `by_events`.
#[track_caller]
pub fn assert_declared_and_recorded(m: &Metrics, at_start: &BTreeSet<Recorded>, by_events: &BTreeSet<Recorded>) {
    let mut problems = Vec::new();
    for (name, kind, labels) in at_start.iter().chain(by_events) {
        let declared = name.strip_prefix(m.prefix).and_then(|n| n.strip_prefix('_')).and_then(|n| m.declared(n));
        match declared {
            None => problems.push(format!("{name} is recorded but not declared")),
            Some(d) if d.kind != *kind || d.labels != labels.as_slice() => problems.push(format!(
                "{name} is recorded as a {kind:?} with labels {labels:?}, declared a {:?} with {:?}",
                d.kind, d.labels
            )),
            Some(_) => {}
        }
    }
    for table in m.tables() {
        for d in table.iter().filter(|d| !COMMON.contains(d)) {
            let name = m.full(d.name);
            if !by_events.iter().any(|(n, _, _)| *n == name) {
                problems.push(format!("{name} is declared but no event records it"));
            }
        }
    }
    assert!(problems.is_empty(), "the metrics tables and what is recorded disagree:\n{}", problems.join("\n"));
}
