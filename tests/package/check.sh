#!/usr/bin/env bash
# The packages as a platform engineer meets them, on a throwaway machine (CI's), as root. The
# server's: its contents (binary, unit, conffile, manual page, completions, console), an install
# that makes the service's user and an admin token only it reads, the unit as systemd-analyze
# verifies it, the installed binary serving the installed configuration (one route added) in
# front of a counting tool, where a retried charge runs once, with the README's audit-trail recipe
# (a signing key its group reads, a retention policy) applied; then a purge that keeps the ledger.
# The console's: its binary, a valid desktop entry and its icons.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "package: $*" >&2; exit 1; }
deb=$(ls target/package/idemgate_*_amd64.deb | head -1)
[ -f "$deb" ] || fail "no package in target/package (bash .ci/package)"
work=$(mktemp -d)
tool= serve=
cleanup() {
  [ -n "$serve" ] && kill "$serve" 2>/dev/null || true
  [ -n "$tool" ] && kill "$tool" 2>/dev/null || true
  dpkg --purge idemgate >/dev/null 2>&1 || true
  rm -rf /var/lib/idemgate /etc/idemgate/checkpoint.key /etc/idemgate/checkpoint.pub "$work"
  for u in idemgate-op idemgate-other; do userdel "$u" >/dev/null 2>&1 || true; done
  getent passwd idemgate >/dev/null && deluser --system --quiet idemgate >/dev/null 2>&1 || true
  getent group idemgate >/dev/null && delgroup --system --quiet idemgate >/dev/null 2>&1 || true
}
trap cleanup EXIT

dpkg-deb -c "$deb" | awk '{print $NF}' >"$work/contents"
for f in ./usr/bin/idemgate ./etc/idemgate/idemgate.toml ./usr/share/man/man1/idemgate.1.gz \
  ./usr/share/bash-completion/completions/idemgate ./usr/share/zsh/vendor-completions/_idemgate \
  ./usr/share/fish/vendor_completions.d/idemgate.fish ./usr/share/idemgate/console/index.html \
  ./usr/share/doc/idemgate/copyright; do
  grep -qx "$f" "$work/contents" || fail "$f is not in the package"
done
unit=$(grep -E '^\./(usr/)?lib/systemd/system/idemgate\.service$' "$work/contents") \
  || fail "the systemd unit is not in the package"
dpkg-deb -e "$deb" "$work/control"
grep -qx /etc/idemgate/idemgate.toml "$work/control/conffiles" || fail "idemgate.toml is not a conffile"

getent passwd idemgate >/dev/null && fail "a user idemgate exists before the install"
dpkg -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
getent passwd idemgate >/dev/null || fail "the install made no user idemgate"
[ "$(stat -c '%a %U' /etc/idemgate/admin-token)" = "600 idemgate" ] \
  || fail "the admin token is $(stat -c '%a %U' /etc/idemgate/admin-token), not 600 idemgate"
grep -qE '^igt_[0-9a-f]{64}$' /etc/idemgate/admin-token || fail "the admin token is not a new token"
systemd-analyze verify "${unit#.}" || fail "systemd-analyze verify ${unit#.}"
/usr/bin/idemgate --help >/dev/null || fail "idemgate --help from /usr/bin"
runuser -u idemgate -- /usr/bin/idemgate serve --config /etc/idemgate/idemgate.toml --check \
  >"$work/check.out" || fail "the installed configuration does not pass serve --check"
grep -q "admin API on 127.0.0.1:8701" "$work/check.out" || fail "$(cat "$work/check.out")"

# The README's audit-trail recipe, run as written: a signing key the service's group reads, the
# archive directory, the retention policy. No systemd here: its restart is the serve below.
recipe() {
  awk -v n="$1" '/^### An audit trail that lasts/ { on = 1 }
    on && /^```sh$/ { if (++c == n) { p = 1; next } }
    p && /^```$/ { exit }
    p' README.md
}
[ -n "$(recipe 1)" ] || fail "no audit-trail recipe in README.md"
(systemctl() { echo "systemctl $*"; }; set -e; eval "$(recipe 1)") >"$work/recipe.log" 2>&1 \
  || { cat "$work/recipe.log" >&2; fail "the README's audit-trail recipe"; }
[ "$(stat -c '%a %U %G' /etc/idemgate/checkpoint.key)" = "640 root idemgate" ] \
  || fail "the signing key is $(stat -c '%a %U %G' /etc/idemgate/checkpoint.key), not 640 root idemgate"
grep -q '^signing_key_file = "/etc/idemgate/checkpoint.key"' /etc/idemgate/idemgate.toml \
  || fail "the recipe did not set signing_key_file"

# The installed configuration, as the service's user reads it, with a route to a counting tool.
python3 examples/fake-tool.py 9042 >"$work/tool.log" 2>&1 & tool=$!
for _ in $(seq 100); do curl -sf localhost:9042/_charges >/dev/null && break; sleep 0.1; done
cfg=$work/idemgate.toml
cat /etc/idemgate/idemgate.toml - >"$cfg" <<'TOML'

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "http://127.0.0.1:9042"
effect = "write"
TOML
chmod 755 "$work" && chmod 644 "$cfg"
# As the unit runs it: in its state directory, with its umask.
(cd /var/lib/idemgate && umask 0007 && exec runuser -u idemgate -- /usr/bin/idemgate serve --config "$cfg") \
  >"$work/serve.out" 2>"$work/serve.log" & serve=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$work/serve.out" || { cat "$work/serve.log" >&2; fail "the installed binary did not start"; }
charge() {
  curl -s -D "$work/headers" -o /dev/null -w '%{http_code}' localhost:8700/v1/charges \
    -H 'content-type: application/json' -H 'Idempotency-Key: pkg-1' -d '{"amount": 100}'
}
code=$(charge); [ "$code" = 201 ] || { cat "$work/serve.log" "$work/tool.log" >&2; fail "the first charge: $code"; }
[ "$(charge)" = 201 ] || fail "the retried charge"
grep -qi '^idempotent-replayed: true' "$work/headers" || fail "the retry was not replayed"
[ "$(curl -s localhost:9042/_charges)" = '{"pkg-1": 1}' ] || fail "charged $(curl -s localhost:9042/_charges)"
token=$(cat /etc/idemgate/admin-token)
curl -sf -H "Authorization: Bearer $token" localhost:8701/admin/v1/whoami | grep -q '"name":"admin"' \
  || fail "the admin token from the install does not open the admin API"
# The service, as its user, runs the recipe's retention policy (at once, then at its interval).
for _ in $(seq 100); do
  curl -sf -H "Authorization: Bearer $token" "localhost:8701/admin/v1/events?kind=retention&limit=1" \
    | grep -q '"kind":"retention"' && break
  sleep 0.1
done
curl -sf -H "Authorization: Bearer $token" "localhost:8701/admin/v1/events?kind=retention&limit=1" \
  | grep -q '"kind":"retention"' || { cat "$work/serve.log" >&2; fail "the service ran no retention policy"; }
# `systemctl reload`, as the unit says it: its ExecReload lines, as the service's user, on the file
# this service reads; a route added serves new requests.
cat >>"$cfg" <<'TOML'

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "http://127.0.0.1:9042"
effect = "write"
TOML
mainpid=$(pgrep -u idemgate -x idemgate) || fail "no idemgate process runs as idemgate"
grep '^ExecReload=' "${unit#.}" | sed "s|^ExecReload=||; s|\$MAINPID|$mainpid|; s|/etc/idemgate/idemgate.toml|$cfg|" \
  | while read -r line; do runuser -u idemgate -- sh -c "$line" || exit 1; done \
  || { cat "$work/serve.log" >&2; fail "the unit's ExecReload"; }
refund() {
  curl -s -o /dev/null -w '%{http_code}' localhost:8700/v1/refunds \
    -H 'content-type: application/json' -H 'Idempotency-Key: pkg-r1' -d '{"amount": 5}'
}
for _ in $(seq 100); do [ "$(refund)" = 201 ] && break; sleep 0.1; done
[ "$(refund)" = 201 ] || { cat "$work/serve.log" >&2; fail "the reloaded route: $(refund)"; }
# An operator in the group idemgate reads and acts on the service's ledger; anyone else does not.
useradd --no-create-home --groups idemgate idemgate-op && useradd --no-create-home idemgate-other
runuser -u idemgate-op -- /usr/bin/idemgate entries --ledger /var/lib/idemgate/ledger.db --json \
  | grep -q '"key": *"pkg-1"' || fail "an operator in the group idemgate cannot read the ledger"
[ "$(stat -c '%a %G' /var/lib/idemgate/ledger.db)" = "660 idemgate" ] \
  || fail "the ledger is $(stat -c '%a %G' /var/lib/idemgate/ledger.db): its operators cannot write it"
runuser -u idemgate-other -- /usr/bin/idemgate entries --ledger /var/lib/idemgate/ledger.db \
  >/dev/null 2>&1 && fail "a user outside the group idemgate read the ledger"
kill "$serve" && wait "$serve" 2>/dev/null || true
serve=
# The auditor's half of the recipe: the whole history, with the public key.
(set -e; eval "$(recipe 2)") >"$work/verify.log" 2>&1 \
  || { cat "$work/verify.log" >&2; fail "the README's verify of the whole history"; }

dpkg --purge idemgate >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg --purge"; }
[ ! -e /usr/bin/idemgate ] && [ ! -e /etc/idemgate/admin-token ] || fail "the purge left the binary or the token"
[ -f /var/lib/idemgate/ledger.db ] || fail "the purge deleted the ledger, an audit trail"
echo "package: $(basename "$deb") installs, verifies, serves and purges"

console=$(ls target/package/idemgate-console_*_amd64.deb | head -1)
[ -f "$console" ] || fail "no console package in target/package"
dpkg-deb -c "$console" | awk '{print $NF}' | sed 's|^\./||' >"$work/console"
for f in usr/bin/idemgate-console usr/share/applications/idemgate-console.desktop \
  usr/share/icons/hicolor/32x32/apps/idemgate-console.png \
  usr/share/icons/hicolor/128x128/apps/idemgate-console.png; do
  grep -qx "$f" "$work/console" || fail "$f is not in the console's package"
done
dpkg-deb --fsys-tarfile "$console" | tar -xO --wildcards '*usr/share/applications/idemgate-console.desktop' \
  >"$work/idemgate-console.desktop"
desktop-file-validate "$work/idemgate-console.desktop" || fail "the console's desktop entry"
grep -qx 'Exec=idemgate-console' "$work/idemgate-console.desktop" || fail "the desktop entry runs $(grep Exec= "$work/idemgate-console.desktop")"
dpkg-deb -f "$console" Depends | grep -q libwebkit2gtk-4.1 || fail "the console does not depend on WebKitGTK"
echo "package: $(basename "$console") holds the console, its desktop entry and icons"
