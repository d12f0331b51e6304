#!/usr/bin/env bash
# Reruns docs/safety-rules.md: for every (safety) rule of ntmutexd, the
# scenario with every rule on (`<rule>_holds`) and with that rule switched
# off (`<rule>_is_needed`, ignored tests included: those are the rules not
# shown necessary yet). Prints one line per rule. Then the same for
# tokenwatchd, electd and ringd, whose safety tests each run the scenario
# with every rule on and with the rule off (a test whose name says a rule
# is needed passes when the scenario fails without it; an ignored one is a
# rule not shown necessary, and fails here; one named `…unreachable…`
# shows that the rule's precondition never arises). The rules are each
# daemon's rule table (NtRule, TwRule, ElRule, RdRule: `ftcore::rules!`),
# switched off through ftcore's `mutations` feature, which the safety tests
# enable. `the_rule_table_matches_the_scenarios_and_the_docs` (the table
# check, in each safety.rs) is not a rule: it runs, but no pattern below
# counts it.
#
# Usage: scripts/safety-audit.sh            (from any directory)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# Build first, so that a build error is not mistaken for a rule.
cargo test -p ntmutexd --test safety --no-run --quiet
# Failing tests are results here, not errors.
cargo test -p ntmutexd --test safety -- --include-ignored --skip survey \
    --test-threads 2 >"$log" 2>&1 || true

result() { # test name -> ok | FAILED | missing
    local line
    line="$(grep -E "^test $1 \.\.\. " "$log" || true)"
    case "$line" in
    *" ok") echo ok ;;
    *FAILED) echo FAILED ;;
    *) echo missing ;;
    esac
}

rules="$(grep -oE '^fn [a-z0-9_]+_is_needed\(' bins/ntmutexd/tests/safety.rs | sed -E 's/^fn (.*)_is_needed\(/\1/' || true)
$(grep -oE '^ *[a-z0-9_]+_holds, [a-z0-9_]+_is_needed,' bins/ntmutexd/tests/safety.rs | sed -E 's/^ *([a-z0-9_]+)_holds,.*/\1/' || true)"

# A passing test named `…masked…` whose name holds the rule's shows the
# rule masked: the scenario fails only with other rules off as well.
masked() { # rule -> the masking test's name, or nothing
    grep -E "^test [a-z0-9_]*masked[a-z0-9_]* \.\.\. ok$" "$log" | sed -E 's/^test ([a-z0-9_]+) .*/\1/' |
        grep -F "$1" | head -n 1 || true
}

shown=0
total=0
masked_n=0
while read -r rule; do
    [ -n "$rule" ] || continue
    total=$((total + 1))
    h="$(result "${rule}_holds")"
    n="$(result "${rule}_is_needed")"
    m="$(masked "$rule")"
    if [ "$h" = ok ] && [ "$n" = ok ]; then
        verdict="PASS  (holds with the rule; fails without it)"
        shown=$((shown + 1))
    elif [ "$h" = ok ] && [ -n "$m" ]; then
        verdict="MASKED (fails only with other rules off too: $m)"
        masked_n=$((masked_n + 1))
    elif [ "$h" != ok ]; then
        verdict="FAIL  (the scenario fails with every rule on: $h)"
    else
        verdict="FAIL  (not shown necessary: the scenario passes without the rule)"
    fi
    printf '%-34s %s\n' "$rule" "$verdict"
done <<<"$rules"
echo "$shown of $total rules shown necessary, $masked_n masked (docs/safety-rules.md)"

for d in tokenwatchd electd ringd; do
    cargo test -p "$d" --test safety --no-run --quiet
    cargo test -p "$d" --test safety -- --include-ignored --skip survey \
        --test-threads 2 >"$log" 2>&1 || true
    shown=0
    total=0
    masked_n=0
    masks=0
    unreachable_n=0
    while read -r name status; do
        total=$((total + 1))
        rule="${name%_is_needed}"
        m=""
        [ "$rule" != "$name" ] && m="$(masked "$rule")"
        if [ "$status" = ok ] && [[ "$name" == masked_rules* ]]; then
            verdict="MASKED (switching these rules off breaks no scenario: the doc says why)"
            total=$((total - 1))
        elif [ "$status" = ok ] && [[ "$name" == *unreachable* ]]; then
            verdict="UNREACHABLE (its precondition never arises with the other rules on: checked after every step; the check fires with them off)"
            total=$((total - 1))
            unreachable_n=$((unreachable_n + 1))
        elif [ "$status" = ok ] && [[ "$name" == *masked* ]]; then
            verdict="MASK  (the scenario fails only with all the rules its name gives off)"
            total=$((total - 1))
            masks=$((masks + 1))
        elif [ "$status" = ok ]; then
            verdict="PASS  (holds with the rule; fails without it)"
            shown=$((shown + 1))
        elif [ -n "$m" ]; then
            verdict="MASKED (fails only with other rules off too: $m)"
            masked_n=$((masked_n + 1))
        else
            verdict="FAIL  (not shown necessary, the scenario fails with every rule on, or a masked rule now breaks one)"
        fi
        printf '%-12s %-52s %s\n' "$d" "$name" "$verdict"
    done < <(grep -E '^test [a-z0-9_]*(need|masked|unreachable)[a-z0-9_]* \.\.\. ' "$log" | sed -E 's/^test ([a-z0-9_]+) \.\.\. ([A-Za-z]+).*/\1 \2/')
    echo "$d: $shown of $total rule tests pass, $masked_n masked, $masks mask scenarios pass, $unreachable_n unreachable (docs/safety-rules.md)"
done
