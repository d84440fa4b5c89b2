#!/usr/bin/env bash
# The README's "Put idemgate in front of a tool" section, step by step, with each answer checked.
# CI runs it, so the README stays true. Uses ports 8700, 8701 and 9000 on 127.0.0.1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
idemgate=${IDEMGATE_BIN:-$root/target/debug/idemgate}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
fail() { echo "walkthrough: FAILED: $*" >&2; exit 1; }
step() { echo; echo "\$ $*"; }

export IDEMGATE_ADMIN_TOKEN=dev-admin-token CHARGES_SECRET=whsec_dev PROCESSOR_AUTH='Bearer sk_dev'
python3 "$root/examples/fake-tool.py" 9000 & pids+=($!)
"$idemgate" serve --config "$root/examples/idemgate.toml" > serve.out 2> serve.log & pids+=($!)
for _ in $(seq 100); do grep -q listening serve.out 2>/dev/null && curl -s localhost:9000/_charges >/dev/null && break; sleep 0.1; done
grep -q listening serve.out || { cat serve.log; fail "serve did not start"; }

charge() { curl -s -i -X POST localhost:8700/v1/charges -H 'content-type: application/json' -H 'x-agent-id: agent-1' "$@"; }

step "charge once (201, the key echoed)"
out=$(charge -H 'Idempotency-Key: order-42' -d '{"amount": 4999, "customer": "cus_1"}'); echo "$out"
grep -q '^HTTP/1.1 201' <<<"$out" || fail "first charge"

step "the agent retries: replayed from the ledger, the tool is not called again"
out=$(charge -H 'Idempotency-Key: order-42' -d '{"customer": "cus_1", "amount": 4999}'); echo "$out"
grep -qi '^idempotent-replayed: true' <<<"$out" || fail "replay"
# The tool is sent agent-1's order-42 as a UUID of the two (scoped keys stay apart upstream).
charges() { curl -s localhost:9000/_charges | python3 -c 'import json, sys; print(sorted(json.load(sys.stdin).values()))'; }
[ "$(charges)" = '[1]' ] || fail "charged twice"

step "same key, different arguments: 422 key-reuse"
out=$(charge -H 'Idempotency-Key: order-42' -d '{"amount": 100, "customer": "cus_1"}'); echo "$out"
grep -q '^HTTP/1.1 422' <<<"$out" || fail "key reuse"

step "no key: 400 missing-key"
out=$(charge -d '{"amount": 1}'); echo "$out"
grep -q '^HTTP/1.1 400' <<<"$out" || fail "missing key"

step "the response is lost after the charge: 502 outcome-unknown, and retries are held (409)"
out=$(charge -H 'Idempotency-Key: order-43' -H 'X-Fault: drop' -d '{"amount": 2500, "customer": "cus_2"}'); echo "$out"
grep -q '^HTTP/1.1 502' <<<"$out" || fail "lost response"
out=$(charge -H 'Idempotency-Key: order-43' -d '{"amount": 2500, "customer": "cus_2"}'); echo "$out"
grep -q '^HTTP/1.1 409' <<<"$out" || fail "held"

step "idemgate entries --ledger idemgate.db --stuck"
"$idemgate" entries --ledger idemgate.db --stuck | tee entries.txt
id=$(awk '/order-43/ {print $1}' entries.txt); [ -n "$id" ] || fail "stuck entry not listed"

step "idemgate reconcile --config idemgate.toml $id --operator you --reason 'ask the processor'"
"$idemgate" reconcile --config "$root/examples/idemgate.toml" "$id" --operator you --reason "ask the processor" | tee rec.txt
grep -q 'completed' rec.txt || fail "reconcile"

step "the agent's retry now gets the recorded outcome; the tool was charged once"
out=$(charge -H 'Idempotency-Key: order-43' -d '{"amount": 2500, "customer": "cus_2"}'); echo "$out"
grep -qi '^idempotent-replayed: true' <<<"$out" || fail "replay after reconcile"
[ "$(charges)" = '[1, 1]' ] || fail "counts"

step "the admin API and metrics need the token"
curl -s -o /dev/null -w '%{http_code}\n' localhost:8701/admin/v1/entries | grep -q 401 || fail "admin without token"
curl -s -H "Authorization: Bearer $IDEMGATE_ADMIN_TOKEN" 'localhost:8701/admin/v1/entries?stuck=true' | head -c 300; echo
curl -s -H "Authorization: Bearer $IDEMGATE_ADMIN_TOKEN" localhost:8701/metrics | grep '^idemgate_requests_total' || fail "metrics"

step "a refund over 500.00 USD waits for two operators; its request waits for their decision"
refund() { curl -si -X POST localhost:8700/v1/refunds -H 'content-type: application/json' -H 'x-agent-id: agent-1' -H 'Idempotency-Key: refund-1' -d '{"amount": 60000, "charge": "ch_0001", "customer": "cus_2"}'; }
refund > refund.txt & waiting=$!
for _ in $(seq 100); do "$idemgate" approvals --ledger idemgate.db --open | tee held.txt | grep -q refund-1 && break; sleep 0.1; done
cat held.txt; grep -q 'cus_2 · refunds · 600.00 USD .*waiting: 0 of 2' held.txt || fail "refund not held"
id=$(awk '/refund-1/ {print $1}' held.txt)
[ "$(charges)" = '[1, 1]' ] || fail "a held refund reached the tool"
step "idemgate approve --ledger idemgate.db $id --operator you --reason 'the customer asked'"
"$idemgate" approve --ledger idemgate.db "$id" --operator you --reason "the customer asked" | tee ok1.txt
grep -q 'approved 1/2' ok1.txt || fail "first approval"
step "the second operator approves through the admin API: idemgate refunds once"
curl -s -X POST localhost:8701/admin/v1/approvals/$id/approve -H "Authorization: Bearer $IDEMGATE_ADMIN_TOKEN" -H 'content-type: application/json' -d '{"reason": "checked the charge"}' | tee ok2.txt; echo
jq -e '.end == "approved"' ok2.txt >/dev/null || fail "second approval"
wait "$waiting"; cat refund.txt
grep -q '^HTTP/1.1 201' refund.txt || fail "the waiting refund's answer"
grep -qi '^idempotent-replayed' refund.txt && fail "the waiting refund's own answer marked replayed"
step "the agent sends it once more: the refund's result, replayed"
out=$(refund); echo "$out"
grep -qi '^idempotent-replayed: true' <<<"$out" || fail "refund replay"
[ "$(charges)" = '[1, 1, 1]' ] || fail "refunded $(charges)"

step "idemgate entries --ledger idemgate.db --search cus_2: the customer's charge and refund"
"$idemgate" entries --ledger idemgate.db --search cus_2 | tee cus2.txt
grep -q ' order-43 ' cus2.txt && grep -q ' refund-1 ' cus2.txt || fail "cus_2's calls"

step "an export through the admin API, downloaded and verified (README: Exports and verification)"
T="Authorization: Bearer $IDEMGATE_ADMIN_TOKEN"; A=http://127.0.0.1:8701/admin/v1
id=$(curl -sf -H "$T" -H 'content-type: application/json' -d '{"format":"ndjson","since":"7d"}' $A/exports | jq -r .id)
until curl -sf -H "$T" $A/exports/$id | jq -e '.state != "running"' >/dev/null; do sleep 1; done
curl -sfOJ -H "$T" $A/exports/$id/file && curl -sfOJ -H "$T" $A/exports/$id/manifest
"$idemgate" verify --export idemgate-export-$id.ndjson || fail "admin export"
curl -sf -H "$T" -H 'content-type: application/json' --data @idemgate-export-$id.ndjson.manifest.json $A/verify/against | jq -e .ok || fail "verify against"

step "idemgate log --ledger idemgate.db --kind reconcile"
"$idemgate" log --ledger idemgate.db --kind reconcile | grep -q 'by you: ask the processor' || fail "log"

kill -TERM "${pids[1]}"; wait "${pids[1]}" || fail "serve did not stop cleanly"
"$idemgate" verify --ledger idemgate.db
echo; echo "walkthrough: OK"
