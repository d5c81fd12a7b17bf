#!/usr/bin/env bash
# The Debian package in a booted systemd: a minimal bookworm root (mmdebstrap, cached), the .deb
# installed with dpkg, booted with systemd-nspawn as PID 1, driven with nsenter.
#
#   booted-systemd.sh DEB ROOT_TARBALL
#
# Prints one "ok - …" or "not ok - …" line per check and "N passed, N failed" at the end; exits
# non-zero when a check failed. Every wait is bounded; the container is stopped on exit.
set -uo pipefail

deb=$1
tarball=$2
work=$(mktemp -d /var/tmp/countdownd-booted.XXXXXX)
root=$work/root
machine=cdtest-$$
passed=0
failed=0
nspawn=

ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1"; failed=$((failed + 1)); }
check() { # check DESCRIPTION COMMAND...: its output goes to a log, shown when it fails
    local what=$1; shift
    if "$@" > "$work/check.log" 2>&1; then ok "$what"; else not_ok "$what"; sed 's/^/    /' "$work/check.log"; fi
}

cleanup() {
    if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
        [ -n "${pid1:-}" ] && nsenter -t "$pid1" -a systemctl poweroff >/dev/null 2>&1
        for _ in $(seq 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
        # Still there: ending the container's PID 1 ends its whole PID namespace.
        [ -n "${pid1:-}" ] && kill -9 "$pid1" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$nspawn" 2>/dev/null
        wait "$nspawn" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' TERM INT HUP

mkdir -p "$root"
tar -xf "$tarball" -C "$root" || { echo "not ok - unpack $tarball"; exit 1; }
# Not under /tmp: the booted system mounts a fresh tmpfs there.
cp "$deb" "$root/root/countdownd.deb"

# The package's size, as apt shows it before a download and after an install.
deb_bytes=$(stat -c %s "$deb")
installed_kib=$(dpkg-deb -f "$deb" Installed-Size)
check "the .deb is at most 8 MB ($deb_bytes bytes)" test "$deb_bytes" -le 8000000
check "…and at most 25 MB installed ($installed_kib KiB)" test "$((installed_kib * 1024))" -le 25000000

# Installed as an operator would, before the boot: dpkg runs the maintainer scripts (the group
# through systemd-sysusers, the socket enabled through deb-systemd-helper).
check "dpkg -i installs the package" chroot "$root" dpkg -i /root/countdownd.deb
check "the countdown group exists" chroot "$root" getent group countdown
check "the socket is enabled for boot" test -L "$root/etc/systemd/system/sockets.target.wants/countdownd.socket"
chroot "$root" useradd --create-home --groups countdown alice
chroot "$root" useradd --create-home bob
# For the watchdog check: a shorter interval than the unit's 20 s (the mechanism, not the figure).
mkdir -p "$root/etc/systemd/system/countdownd.service.d"
printf '[Service]\nWatchdogSec=4s\n' > "$root/etc/systemd/system/countdownd.service.d/test-watchdog.conf"

systemd-nspawn -D "$root" -b --console=pipe -q --register=no --keep-unit --machine="$machine" \
    > "$work/console.log" 2>&1 &
nspawn=$!
# The container's PID 1: the child of systemd-nspawn that runs systemd (not a short-lived
# helper it may fork first).
pid1=
for _ in $(seq 300); do
    for child in $(ps -o pid= --ppid "$nspawn"); do
        [ "$(cat /proc/"$child"/comm 2>/dev/null)" = systemd ] && pid1=$child
    done
    [ -n "$pid1" ] && break
    sleep 0.1
done
[ -n "$pid1" ] || { echo "not ok - the container started"; cat "$work/console.log"; exit 1; }
run() { nsenter -t "$pid1" -a "$@"; }
as() { local user=$1; shift; nsenter -t "$pid1" -a runuser -u "$user" -- "$@"; }
wait_for() { # wait_for SECONDS COMMAND...: until it succeeds, or the time is up
    local tenths=$(($1 * 10)); shift
    for _ in $(seq "$tenths"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
booted() { case $(run systemctl is-system-running 2>/dev/null) in running | degraded) return 0 ;; *) return 1 ;; esac; }
check "systemd booted as PID 1" wait_for 60 booted
socket=/run/countdownd/countdownd.sock
state_at_boot=$(run systemctl is-system-running 2>/dev/null)

check "countdownd.socket is listening after boot" test "$(run systemctl is-active countdownd.socket)" = active
check "the service waits for its first client" test "$(run systemctl is-active countdownd.service)" = inactive
check "cdctl start socket-activates the service" run cdctl --socket "$socket" start tea 1h
check "the service is active" test "$(run systemctl is-active countdownd.service)" = active
status_shows() { run systemctl status --no-pager countdownd.service | grep -q 'Status: "1 running'; }
check "systemctl status shows STATUS=" wait_for 10 status_shows
# Threads named after their work, as top -H and systemd's messages show them, not libdispatch's.
daemon_pid=$(run systemctl show -p MainPID --value countdownd.service)
threads=$(run sh -c "cat /proc/$daemon_pid/task/*/comm" 2>&1 | sort -u | tr '\n' ' ')
check "the daemon's threads are named after their work ($threads)" \
    sh -c 'case " $1" in *" countdownd "*) ;; *) exit 1 ;; esac; for t in $1; do case $t in countdownd | cd-*) ;; *) exit 1 ;; esac; done' - "$threads"

libraries=$(run ldd /usr/bin/countdownd)
check "ldd runs in the container" test -n "$libraries"
check "…and names no toolchain path" sh -c "! printf '%s' \"\$1\" | grep -q -e 'not found' -e /opt/swift -e swift" - "$libraries"

check "a member of the countdown group connects" as alice cdctl --socket "$socket" start tea 5m
alice_uid=$(run id -u alice)
check "…and gets a namespace of its own" sh -c "nsenter -t $pid1 -a runuser -u alice -- cdctl --socket $socket list --format '{name}' | grep -qx tea && nsenter -t $pid1 -a cdctl --socket $socket list --format '{name}' | grep -qx $alice_uid/tea"
refused=$(as bob cdctl --socket "$socket" list 2>&1; echo "exit $?")
check "a user outside the group is refused, with cdctl's reason" sh -c "printf '%s' \"\$1\" | grep -qi 'permission' && ! printf '%s' \"\$1\" | grep -q 'exit 0'" - "$refused"
# No --socket, no daemon of their own: a member of the group just runs cdctl, as with at or chronyc.
check "a group member's plain cdctl finds the system daemon" sh -c "nsenter -t $pid1 -a runuser -u alice -- cdctl list --format '{name}' | grep -qx tea"
used=$(as alice cdctl --verbose list 2>&1 >/dev/null)
check "…and says which socket under --verbose" sh -c "printf '%s' \"\$1\" | grep -q 'using countdownd .* at /run/countdownd/countdownd.sock'" - "$used"
refused=$(as bob cdctl list 2>&1; echo "exit $?")
check "a non-member's plain cdctl names the paths tried and the real fix" sh -c "printf '%s' \"\$1\" | grep -q '/run/countdownd/countdownd.sock (permission denied)' && printf '%s' \"\$1\" | grep -q \"usermod -aG countdown bob'), then log in again\" && printf '%s' \"\$1\" | grep -q 'exit 6'" - "$refused"

restarts() { run systemctl show -p NRestarts --value countdownd.service; }
before=$(restarts)
run systemctl kill -s KILL countdownd.service
restarted() { [ "$(restarts)" -gt "$before" ] && [ "$(run systemctl is-active countdownd.service)" = active ]; }
check "SIGKILL: systemd restarts it (Restart=on-failure)" wait_for 30 restarted
check "…with its state intact" sh -c "nsenter -t $pid1 -a cdctl --socket $socket status tea --format '{state}' | grep -qx running"

old_pid=$(run systemctl show -p MainPID --value countdownd.service)
check "reinstalled (an upgrade) over a running daemon" run dpkg -i /root/countdownd.deb
new_pid=$(run systemctl show -p MainPID --value countdownd.service)
check "…it is restarted on the new binary" sh -c "[ '$new_pid' != 0 ] && [ '$new_pid' != '$old_pid' ]"
check "…the socket stayed listening" test "$(run systemctl is-active countdownd.socket)" = active
check "…with its state intact" sh -c "nsenter -t $pid1 -a cdctl --socket $socket status tea --format '{state}' | grep -qx running"

before=$(restarts)
run systemctl kill -s STOP countdownd.service
check "SIGSTOP past WatchdogSec: the watchdog restarts it" wait_for 60 restarted
check "…with its state intact" sh -c "nsenter -t $pid1 -a cdctl --socket $socket status tea --format '{state}' | grep -qx running"

# The conffile: dpkg's, kept across upgrades; a setting in it takes effect at the next restart.
check "/etc/countdownd/countdownd.conf is a conffile" sh -c "nsenter -t $pid1 -a dpkg-query -W -f '\${Conffiles}' countdownd | grep -q '/etc/countdownd/countdownd.conf'"
check "…whose settings the daemon reads (--print-config)" sh -c "nsenter -t $pid1 -a countdownd --config /etc/countdownd/countdownd.conf --print-config | grep -qx 'max-countdowns-per-user = 100000'"
run sh -c 'echo "max-countdowns-per-user = 1" >> /etc/countdownd/countdownd.conf'
run systemctl restart countdownd.service
limited=$(as alice cdctl start coffee 5m 2>&1; echo "exit $?")
check "…and a change takes effect after systemctl restart (alice, who has tea, may hold 1)" sh -c "printf '%s' \"\$1\" | grep -q 'limit' && ! printf '%s' \"\$1\" | grep -q 'exit 0'" - "$limited"
run sed -i '/^max-countdowns-per-user = 1$/d' /etc/countdownd/countdownd.conf
run systemctl restart countdownd.service
check "…and back without it" as alice cdctl start coffee 5m

check "an OTP cooldown named by a phone number" run cdctl --socket "$socket" start otp:+4915112345678 1m
run systemctl stop countdownd.service
check "systemctl stop is clean" test "$(run systemctl show -p Result --value countdownd.service)" = success
check "…and the daemon exited 0" test "$(run systemctl show -p ExecMainStatus --value countdownd.service)" = 0

# A regular user's own instance, as the README says to run it: lingering gives bob a user
# manager; he enables the per-user socket, and his plain cdctl finds it (before the system's).
bob_uid=$(run id -u bob)
run loginctl enable-linger bob
user_manager_up() { [ "$(run systemctl is-active "user@$bob_uid.service")" = active ]; }
check "bob's user manager runs (loginctl enable-linger)" wait_for 60 user_manager_up
user_manager_up || { run systemctl status --no-pager "user@$bob_uid.service"; run loginctl list-users; run journalctl -b --no-pager -n 40; } 2>&1 | sed 's/^/    /'
as_bob() { nsenter -t "$pid1" -a runuser -u bob -- env XDG_RUNTIME_DIR="/run/user/$bob_uid" "$@"; }
check "bob enables his own countdownd.socket" as_bob systemctl --user enable --now countdownd.socket
check "…and his plain cdctl starts his own daemon" as_bob cdctl start mine 5m
bob_used=$(as_bob cdctl --verbose list 2>&1 >/dev/null)
check "…which --verbose names ($bob_used)" sh -c "printf '%s' \"\$1\" | grep -q 'at /run/user/$bob_uid/countdownd/countdownd.sock'" - "$bob_used"
# An upgrade restarts his instance on the new binary too (postinst, in his manager), his
# countdown kept.
bob_pid=$(as_bob systemctl --user show -p MainPID --value countdownd.service)
run dpkg -i /root/countdownd.deb >/dev/null 2>&1
check "an upgrade restarts bob's own daemon" test "$(as_bob systemctl --user is-active countdownd.service)" = active
check "…his countdown kept" sh -c "nsenter -t $pid1 -a runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$bob_uid cdctl status mine --format '{state}' | grep -qx running"
check "…in a new process, not left on the old binary" sh -c "[ \"\$(nsenter -t $pid1 -a runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$bob_uid systemctl --user show -p MainPID --value countdownd.service)\" != '$bob_pid' ]"
bob_score=$(as_bob systemd-analyze --user security countdownd.service 2>&1 | sed -n 's/.*Overall exposure level for countdownd.service: \([0-9.]*\).*/\1/p')
bob_root_line=$(as_bob systemd-analyze --user security countdownd.service 2>&1 | grep -c 'Service runs as root user')
check "his per-user service scores 1.5 or lower under his manager ($bob_score), 0.3 of it 'runs as root' (README)" \
    sh -c "[ -n '$bob_score' ] && awk 'BEGIN { exit !($bob_score <= 1.5) }' && [ '$bob_root_line' = 1 ]"

# The daemon's own entries in the whole journal, every field: nothing at warning or worse it did
# not mean to write, none of libdispatch's thread-priority complaints, and no name.
run journalctl -b --no-pager -o export SYSLOG_IDENTIFIER=countdownd > "$work/daemon.log" 2>&1
run journalctl -b --no-pager -o cat -p warning SYSLOG_IDENTIFIER=countdownd > "$work/warnings.log" 2>&1
check "the journal has the daemon's lines" grep -q "listening on" "$work/daemon.log"
check "…and none per countdown by default (0 lines per OTP cooldown)" sh -c "! grep -q -e '^COUNTDOWN_EVENT=' -e 'started, ' '$work/daemon.log'"
check "no thread-priority noise in the journal" sh -c "! grep -q 'thread priority' '$work/daemon.log'"
check "no warning or error from the daemon" test ! -s "$work/warnings.log"
check "no countdown name in the journal, in any field" sh -c "! grep -q -e 4915112345678 -e 'COUNTDOWN_NAME=' '$work/daemon.log'"

# The metrics timer, enabled as an operator would, first where node_exporter's directory is
# missing: the service is skipped by its condition, never failed.
metrics_dir=/var/lib/prometheus/node-exporter
run systemctl enable --now countdownd-metrics.timer >/dev/null 2>&1
metrics_ran() { [ "$(run systemctl show -p ConditionTimestampMonotonic --value countdownd-metrics.service)" != 0 ]; }
check "the metrics timer runs its service" wait_for 30 metrics_ran
check "…which, without node_exporter's directory, is skipped by its condition" sh -c "[ \"\$(nsenter -t $pid1 -a systemctl show -p ConditionResult --value countdownd-metrics.service)\" = no ]"
check "…and not failed" sh -c "! nsenter -t $pid1 -a systemctl is-failed --quiet countdownd-metrics.service"
run mkdir -p "$metrics_dir"
run systemctl start countdownd-metrics.service
check "with the directory, it writes the figures" run test -s "$metrics_dir/countdownd.prom"
check "…readable by node_exporter (0644), though the service's umask is 0077" test "$(run stat -c %a "$metrics_dir/countdownd.prom")" = 644

# Removed while running: stopped, then purged with its state.
check "socket activation once more before the purge" run cdctl --socket "$socket" status tea
check "apt purge removes the package" run env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q countdownd
state_left=$(run sh -c 'ls -d /var/lib/private/countdownd /var/lib/countdownd 2>/dev/null; echo end')
check "…and the state" test "$state_left" = end
check "…the service is stopped" test "$(run systemctl is-active countdownd.service)" != active
check "…and the socket's enablement" test ! -e "$root/etc/systemd/system/sockets.target.wants/countdownd.socket"
check "…and the metrics file, which node_exporter would serve for ever" run test ! -e "$metrics_dir/countdownd.prom"
check "…and the conffile" run test ! -e /etc/countdownd
bob_left=$(run sh -c "for p in /proc/[0-9]*; do [ \"\$(cat \$p/comm 2>/dev/null)\" = countdownd ] && stat -c %U \$p; done; echo end" 2>/dev/null | tr '\n' ' ')
check "…and bob's own daemon is stopped too, not left running a deleted binary" test "$bob_left" = "end "
failed_units=$(run systemctl list-units --failed --plain --no-legend 2>&1)
check "…no unit of ours is failed (the timer stopped before its service went)" sh -c "! printf '%s' \"\$1\" | grep -q countdownd" - "$failed_units"
check "…and the system's state is as it was at boot ($state_at_boot)" test "$(run systemctl is-system-running 2>/dev/null)" = "$state_at_boot"

if [ "$failed" -gt 0 ]; then
    echo "--- the daemon's journal"; cat "$work/daemon.log"
    echo "--- its warnings"; cat "$work/warnings.log"
fi
echo "booted-systemd: $passed ok, $failed not ok"
[ "$failed" -eq 0 ]
