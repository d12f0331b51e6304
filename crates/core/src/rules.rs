//! (Safety) rules as values.
//!
//! Every protocol core declares its rules once, with [`rules!`]: one enum
//! variant per rule, each with its one-line statement, the design section
//! it comes from (`docs/…`), the switch name the safety audit knows it by,
//! and the scenario that fails without it. A guard in the core reads as the
//! rule it enforces:
//!
//! ```ignore
//! if self.cfg.rules.on(TwRule::StaleEpochsRefused) && old { return; }
//! ```
//!
//! [`Rules`] is the set of rules a run has switched *off*. Only a build with
//! this crate's `mutations` feature can switch one off ([`Rules::without`]
//! exists only there); the test crates enable it as a dev-dependency
//! feature, and release builds of the daemons never do. Without the
//! feature, `Rules` is a zero-sized value whose [`Rules::on`] is the
//! constant `true`, so every guard compiles to the rule alone.
//!
//! Code that must do the *wrong* thing when a rule is off (raise a counter
//! the rule says never moves, say) goes in a [`mutant!`] block: it is not
//! even compiled without the feature.

use std::fmt;
use std::marker::PhantomData;

/// A daemon's table of (safety) rules: implemented by [`rules!`].
pub trait Rule: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// Every rule, in declaration order.
    const ALL: &'static [Self];
    /// The table's name (the enum's), for messages.
    const TABLE: &'static str;
    /// Position in [`Rule::ALL`] (below 128).
    fn index(self) -> usize;
    /// The rule's name (the variant's).
    fn name(self) -> &'static str;
    /// The name of the switch that turns it off: the mutation's name in
    /// `docs/safety-rules.md` and in `scripts/safety-audit.sh`.
    fn switch(self) -> &'static str;
    /// What the rule says (its doc comment).
    fn doc(self) -> &'static str;
    /// The design section it comes from (`docs/<file>.md, <section>`).
    fn spec(self) -> &'static str;
    /// The scenario that shows it needed (a test of the daemon's
    /// `tests/safety.rs`, or `masked: …` for a rule only shown together
    /// with the rules that mask it, or `liveness: …`).
    fn scenario(self) -> &'static str;
    /// The rule whose switch is named `switch`.
    fn by_switch(switch: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.switch() == switch)
    }
}

/// The rules switched off: none, always, in a build without the
/// `mutations` feature.
pub struct Rules<R> {
    #[cfg(feature = "mutations")]
    off: u128,
    _table: PhantomData<fn() -> R>,
}

impl<R: Rule> Rules<R> {
    /// Every rule on: the only value a release build can make.
    pub const ALL_ON: Rules<R> = Rules {
        #[cfg(feature = "mutations")]
        off: 0,
        _table: PhantomData,
    };

    /// Whether `rule` is enforced.
    #[inline(always)]
    pub fn on(&self, rule: R) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.off & (1u128 << rule.index()) == 0
        }
        #[cfg(not(feature = "mutations"))]
        {
            let _ = rule;
            true
        }
    }

    /// Whether `rule` is switched off (a mutation test).
    #[inline(always)]
    pub fn off(&self, rule: R) -> bool {
        !self.on(rule)
    }

    /// Whether every rule is on: the cores' own `debug_assert!`s of their
    /// invariants check only then (a mutation is meant to break them).
    #[inline(always)]
    pub fn all_on(&self) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.off == 0
        }
        #[cfg(not(feature = "mutations"))]
        {
            true
        }
    }

    /// The rules switched off, in table order.
    pub fn switched_off(&self) -> impl Iterator<Item = R> + '_ {
        R::ALL.iter().copied().filter(move |r| self.off(*r))
    }

    /// These rules with `rule` switched off as well.
    #[cfg(feature = "mutations")]
    #[must_use]
    pub fn without(mut self, rule: R) -> Self {
        self.off |= 1u128 << rule.index();
        self
    }

    /// These rules with `rule` switched back on.
    #[cfg(feature = "mutations")]
    #[must_use]
    pub fn with(mut self, rule: R) -> Self {
        self.off &= !(1u128 << rule.index());
        self
    }

    /// Every rule on but `rules`.
    #[cfg(feature = "mutations")]
    #[must_use]
    pub fn all_but(rules: &[R]) -> Self {
        rules.iter().fold(Self::ALL_ON, |acc, r| acc.without(*r))
    }

    /// `other`'s table switched off where `f` maps a rule of this table
    /// that is off (a daemon's rule that lives in a shared component).
    #[cfg(feature = "mutations")]
    #[must_use]
    pub fn carry_into<S: Rule>(&self, mut other: Rules<S>, f: impl Fn(R) -> Option<S>) -> Rules<S> {
        for r in self.switched_off() {
            if let Some(s) = f(r) {
                other = other.without(s);
            }
        }
        other
    }
}

impl<R: Rule> Default for Rules<R> {
    fn default() -> Self {
        Self::ALL_ON
    }
}

impl<R> Clone for Rules<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Rules<R> {}

impl<R> PartialEq for Rules<R> {
    fn eq(&self, _other: &Self) -> bool {
        #[cfg(feature = "mutations")]
        {
            self.off == _other.off
        }
        #[cfg(not(feature = "mutations"))]
        {
            true
        }
    }
}
impl<R> Eq for Rules<R> {}

impl<R> std::hash::Hash for Rules<R> {
    fn hash<H: std::hash::Hasher>(&self, _state: &mut H) {
        #[cfg(feature = "mutations")]
        self.off.hash(_state);
    }
}

impl<R: Rule> fmt::Debug for Rules<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.all_on() {
            return write!(f, "{}: all on", R::TABLE);
        }
        f.debug_set().entries(self.switched_off().map(|r| r.switch())).finish()
    }
}

/// A starting value that only a test may choose: a counter started near
/// its wrap, say, to reach in a short run a state a real cluster reaches
/// after years. Built like [`Rules`]: without this crate's `mutations`
/// feature it is zero-sized, [`TestStart::at`] does not exist, and
/// [`TestStart::get`] is the constant `T::default()`; a release build's
/// config cannot carry one.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TestStart<T: Copy + Default> {
    #[cfg(feature = "mutations")]
    value: T,
    _value: PhantomData<T>,
}

impl<T: Copy + Default> TestStart<T> {
    /// A test's starting value.
    #[cfg(feature = "mutations")]
    pub fn at(value: T) -> Self {
        TestStart { value, _value: PhantomData }
    }

    /// The starting value: `T::default()` unless a test chose another.
    #[inline]
    pub fn get(self) -> T {
        #[cfg(feature = "mutations")]
        {
            self.value
        }
        #[cfg(not(feature = "mutations"))]
        {
            T::default()
        }
    }
}

impl<T: Copy + Default + fmt::Debug> fmt::Debug for TestStart<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

/// Declares a table of (safety) rules and its [`Rule`] impl.
///
/// ```
/// ftcore::rules! {
///     /// The rules of a toy protocol.
///     pub enum ToyRule {
///         /// A vote is given once per term.
///         OneVotePerTerm {
///             switch: "second_vote",
///             spec: "docs/toy.md, Votes",
///             scenario: "two_candidates_one_term",
///         },
///     }
/// }
/// use ftcore::rules::{Rule, Rules};
/// assert_eq!(ToyRule::ALL, &[ToyRule::OneVotePerTerm]);
/// assert_eq!(ToyRule::by_switch("second_vote"), Some(ToyRule::OneVotePerTerm));
/// assert!(Rules::<ToyRule>::ALL_ON.on(ToyRule::OneVotePerTerm));
/// ```
#[macro_export]
macro_rules! rules {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $variant:ident { switch: $switch:literal, spec: $spec:literal, scenario: $scenario:literal $(,)? }
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[doc = $doc])* $variant, )+
        }

        impl $crate::rules::Rule for $name {
            const ALL: &'static [Self] = &[ $( $name::$variant, )+ ];
            const TABLE: &'static str = stringify!($name);
            fn index(self) -> usize {
                self as usize
            }
            fn name(self) -> &'static str {
                match self { $( $name::$variant => stringify!($variant), )+ }
            }
            fn switch(self) -> &'static str {
                match self { $( $name::$variant => $switch, )+ }
            }
            fn doc(self) -> &'static str {
                match self { $( $name::$variant => concat!($($doc, "\n"),*).trim_ascii(), )+ }
            }
            fn spec(self) -> &'static str {
                match self { $( $name::$variant => $spec, )+ }
            }
            fn scenario(self) -> &'static str {
                match self { $( $name::$variant => $scenario, )+ }
            }
        }

        const _: () = assert!(
            <$name as $crate::rules::Rule>::ALL.len() <= 128,
            "a rule table holds at most 128 rules"
        );
    };
}

/// Code that runs only when a rule is switched off and does what the rule
/// forbids: compiled only with the `mutations` feature, so a release build
/// holds no such code.
#[cfg(feature = "mutations")]
#[macro_export]
macro_rules! mutant {
    ($($body:tt)*) => { $($body)* };
}

/// Code that runs only when a rule is switched off and does what the rule
/// forbids: compiled only with the `mutations` feature, so a release build
/// holds no such code.
#[cfg(not(feature = "mutations"))]
#[macro_export]
macro_rules! mutant {
    ($($body:tt)*) => {};
}

/// Checks a core's own invariant in debug builds, while every rule of
/// `rules` is on (a mutation test switches a rule off to break one).
#[macro_export]
macro_rules! invariant {
    ($rules:expr, $cond:expr, $($arg:tt)+) => {
        debug_assert!(!$rules.all_on() || $cond, $($arg)+)
    };
}

/// Checks a rule table against the texts that describe it, for a daemon's
/// `tests/safety.rs`: every rule's scenario is a `#[test]` of one of
/// `tests` (the test files' texts; not ignored when it is named
/// `…_is_needed`/`…_are_needed`), every `…_is_needed` test is a rule's
/// scenario, a second scenario of a rule (its body names `Table::Rule`),
/// or an ignored test that names (in its ignore reason) a test that is; every switch appears in
/// `rules_doc` (docs/safety-rules.md), and every switch of a table row of
/// `rules_doc`'s section `# {daemon}…` (its `Switch` column) is a rule's;
/// every rule's `spec` is `docs/<file>.md, <heading>` for one of `docs`
/// (path, text) with a heading that starts with `<heading>`. Returns what
/// is wrong, empty when the table and the texts agree.
#[cfg(feature = "testing")]
pub fn audit<R: Rule>(tests: &[&str], rules_doc: &str, daemon: &str, docs: &[(&str, &str)]) -> Vec<String> {
    let needed = |name: &str| name.ends_with("_is_needed") || name.ends_with("_are_needed");
    // Each top-level fn of `tests`: its name, whether #[test], its
    // #[ignore] line, and whether its body names a rule of the table.
    let mut fns: Vec<(&str, bool, Option<&str>, bool)> = Vec::new();
    for text in tests {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("fn ") else { continue };
            let Some((name, _)) = rest.split_once(['(', '<']) else { continue };
            let above = lines[..i].iter().rev().take_while(|l| l.starts_with("#[") || l.starts_with("///"));
            let (mut is_test, mut ignore) = (false, None);
            for l in above {
                is_test |= *l == "#[test]";
                if l.starts_with("#[ignore") {
                    ignore = Some(*l);
                }
            }
            let body = lines[i + 1..].iter().take_while(|l| !l.starts_with('}'));
            let names_a_rule = body.into_iter().any(|l| l.contains(&format!("{}::", R::TABLE)));
            fns.push((name, is_test, ignore, names_a_rule));
        }
    }
    let mut wrong = Vec::new();
    let scenario_of = |test: &str| R::ALL.iter().any(|r| r.scenario() == test);
    for &rule in R::ALL {
        let (name, scenario) = (rule.name(), rule.scenario());
        match fns.iter().find(|(f, ..)| *f == scenario) {
            None => wrong.push(format!("{name}: no `fn {scenario}(` in the tests")),
            Some((_, false, ..)) => wrong.push(format!("{name}: `{scenario}` is not a #[test]")),
            Some((_, true, Some(_), _)) if needed(scenario) => wrong.push(format!("{name}: `{scenario}` is ignored")),
            Some(_) => {}
        }
        if !rules_doc.contains(&format!("`{}`", rule.switch())) {
            wrong.push(format!("{name}: switch `{}` is not in docs/safety-rules.md", rule.switch()));
        }
        let resolved = rule.spec().split_once(", ").is_some_and(|(file, heading)| {
            docs.iter().any(|(path, text)| {
                *path == file
                    && text.lines().any(|l| l.starts_with('#') && l.trim_start_matches('#').trim().starts_with(heading))
            })
        });
        if !resolved {
            wrong.push(format!("{name}: spec `{}` is no heading of the docs given", rule.spec()));
        }
        if rule.doc().is_empty() {
            wrong.push(format!("{name}: no statement"));
        }
    }
    for (test, _, ignore, names_a_rule) in &fns {
        if !needed(test) || scenario_of(test) || (ignore.is_none() && *names_a_rule) {
            continue;
        }
        let masked_by_a_scenario =
            ignore.is_some_and(|reason| fns.iter().any(|(other, ..)| scenario_of(other) && reason.contains(other)));
        if !masked_by_a_scenario {
            wrong.push(format!("`{test}` is no rule's scenario (nor ignored naming one)"));
        }
    }
    let mut switches: Vec<&str> = R::ALL.iter().map(|r| r.switch()).collect();
    switches.sort_unstable();
    switches.dedup();
    if switches.len() != R::ALL.len() {
        wrong.push("two rules share a switch".to_string());
    }
    // The Switch column of the daemon's tables in docs/safety-rules.md.
    let mut in_section = false;
    let mut column = None;
    for line in rules_doc.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            in_section = title.starts_with(daemon);
            column = None;
            continue;
        }
        if !in_section || !line.starts_with('|') {
            column = if line.starts_with('|') { column } else { None };
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if column.is_none() {
            column = cells.iter().position(|c| *c == "Switch");
            continue;
        }
        let Some(cell) = column.and_then(|c| cells.get(c)) else { continue };
        let Some(switch) = cell.split('`').nth(1) else { continue };
        if R::by_switch(switch).is_none() && !cell.starts_with("---") {
            wrong.push(format!("docs/safety-rules.md names switch `{switch}`, which is no rule of {}", R::TABLE));
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::rules! {
        /// For the tests below.
        enum T {
            /// First.
            /// Second line.
            A { switch: "a_off", spec: "docs/t.md, A", scenario: "sa" },
            /// B.
            B { switch: "b_off", spec: "docs/t.md, B", scenario: "sb" },
        }
    }

    #[test]
    fn the_table_says_what_was_declared() {
        assert_eq!(T::ALL, &[T::A, T::B]);
        assert_eq!(T::TABLE, "T");
        assert_eq!((T::A.index(), T::B.index()), (0, 1));
        assert_eq!(T::A.name(), "A");
        assert_eq!(T::A.doc(), "First.\n Second line.");
        assert_eq!((T::B.switch(), T::B.spec(), T::B.scenario()), ("b_off", "docs/t.md, B", "sb"));
        assert_eq!(T::by_switch("b_off"), Some(T::B));
        assert_eq!(T::by_switch("c_off"), None);
    }

    #[cfg(feature = "testing")]
    #[test]
    fn the_audit_finds_each_kind_of_drift() {
        let tests = "#[test]\nfn sa() {}\n#[test]\nfn sb() {}\n";
        let doc = "# toy: rules\n| Rule | Switch |\n|---|---|\n| A | `a_off` |\n| B | `b_off` |\n";
        let docs = [("docs/t.md", "# A\n## B and more\n")];
        assert_eq!(audit::<T>(&[tests], doc, "toy", &docs), Vec::<String>::new());
        let no_scenario = audit::<T>(&["#[test]\nfn sa() {}\n"], doc, "toy", &docs);
        assert_eq!(no_scenario, vec!["B: no `fn sb(` in the tests"]);
        let stray = audit::<T>(&[&format!("{tests}#[test]\nfn c_is_needed() {{}}\n")], doc, "toy", &docs);
        assert_eq!(stray, vec!["`c_is_needed` is no rule's scenario (nor ignored naming one)"]);
        let masked = format!("{tests}#[test]\n#[ignore = \"masked: see sb\"]\nfn c_is_needed() {{}}\n");
        assert!(audit::<T>(&[&masked], doc, "toy", &docs).is_empty());
        let second = format!("{tests}#[test]\nfn b_again_is_needed() {{\n    off(T::B);\n}}\n");
        assert!(audit::<T>(&[&second], doc, "toy", &docs).is_empty());
        assert!(audit::<T>(&[tests, "#[test]\nfn sb2() {}\n"], doc, "toy", &docs).is_empty());
        let old_doc = format!("{doc}| C | `c_off` |\n");
        assert_eq!(
            audit::<T>(&[tests], &old_doc, "toy", &docs),
            vec!["docs/safety-rules.md names switch `c_off`, which is no rule of T"]
        );
        let no_switch = doc.replace("`b_off`", "b");
        assert_eq!(
            audit::<T>(&[tests], &no_switch, "toy", &docs),
            vec!["B: switch `b_off` is not in docs/safety-rules.md"]
        );
        let moved = [("docs/t.md", "# A\n")];
        assert_eq!(
            audit::<T>(&[tests], doc, "toy", &moved),
            vec!["B: spec `docs/t.md, B` is no heading of the docs given"]
        );
    }

    #[test]
    fn all_on_by_default() {
        let r = Rules::<T>::default();
        assert!(r.on(T::A) && r.on(T::B) && r.all_on());
        assert_eq!(r.switched_off().count(), 0);
        assert_eq!(format!("{r:?}"), "T: all on");
    }

    #[cfg(feature = "mutations")]
    #[test]
    fn a_rule_switched_off_is_off_alone() {
        let r = Rules::<T>::ALL_ON.without(T::B);
        assert!(r.on(T::A) && r.off(T::B) && !r.all_on());
        assert_eq!(r.switched_off().collect::<Vec<_>>(), vec![T::B]);
        assert_eq!(format!("{r:?}"), "{\"b_off\"}");
        assert_ne!(r, Rules::ALL_ON);
        assert_eq!(Rules::all_but(&[T::B]), r);
        assert_eq!(Rules::all_but(&[T::A, T::B]).with(T::A), r);
        let carried = r.carry_into(Rules::<T>::ALL_ON, |x| (x == T::B).then_some(T::A));
        assert_eq!(carried.switched_off().collect::<Vec<_>>(), vec![T::A]);
    }

    #[test]
    fn a_test_start_is_the_default_unless_a_test_sets_it() {
        assert_eq!(TestStart::<u64>::default().get(), 0);
        #[cfg(not(feature = "mutations"))]
        assert_eq!(std::mem::size_of::<TestStart<u64>>(), 0);
        #[cfg(feature = "mutations")]
        assert_eq!(
            (TestStart::at(u64::MAX - 3).get(), format!("{:?}", TestStart::at(7u64))),
            (u64::MAX - 3, "7".into())
        );
    }
}
