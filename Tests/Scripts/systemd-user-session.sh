#!/usr/bin/env bash
# Runs countdownd under a real `systemd --user` manager inside a private mount namespace, and
# prints what it saw as KEY=value lines for the integration test to check.
#
#   unshare --mount bash systemd-user-session.sh BIN_DIR UNIT_DIR
#
# The manager is root's (a user manager of another uid would need a delegated cgroup subtree,
# which this machine's cgroup v1 hierarchy does not offer the tests). The namespace gets its own
# /run/systemd (with the system/ directory systemd --user insists on), so the host is untouched.
# Every wait is bounded.
set -u
bin_dir=$1
unit_src=$2

if [ "${3:-}" != "--body" ]; then
    fake=$(mktemp -d)
    mkdir "$fake/system"
    mount --bind "$fake" /run/systemd || { echo "SKIP=cannot bind-mount over /run/systemd"; exit 0; }
    # Not under /tmp: the unit has PrivateTmp=yes, and a real session's directories are not there
    # either (/run/user/UID, ~/.config, ~/.local/state).
    base=$(mktemp -d -p /run countdownd-test.XXXXXX)
    # Configuration and state under home, as on a desktop: ProtectHome=read-only must leave the
    # state directory writable. (A user unit's StateDirectory= is in $XDG_STATE_HOME from
    # systemd 254 on, in $XDG_CONFIG_HOME before.)
    home=$(mktemp -d -p "$HOME" .countdownd-test.XXXXXX)
    mkdir -p "$base/runtime" "$base/bin" "$home/config/systemd/user" "$home/state"
    chmod 700 "$base/runtime"
    # The binaries as installed, outside /tmp (the build may be there, hidden by PrivateTmp=).
    cp "$bin_dir/countdownd" "$bin_dir/cdctl" "$base/bin/"
    for unit in countdownd.service countdownd.socket; do
        sed "s|@BINDIR@|$base/bin|g" "$unit_src/$unit" > "$home/config/systemd/user/$unit"
    done
    BASE="$base" TEST_HOME="$home" bash "$0" "$base/bin" "$unit_src" --body
    status=$?
    umount /run/systemd
    rm -rf "$fake" "$base" "$home"
    exit $status
fi

export XDG_RUNTIME_DIR=$BASE/runtime XDG_CONFIG_HOME=$TEST_HOME/config XDG_STATE_HOME=$TEST_HOME/state
unset COUNTDOWND_SOCKET NOTIFY_SOCKET LISTEN_FDS LISTEN_PID DBUS_SESSION_BUS_ADDRESS

/lib/systemd/systemd --user >"$XDG_RUNTIME_DIR/manager.log" 2>&1 &
manager=$!
cleanup() {
    systemctl --user exit >/dev/null 2>&1
    for _ in $(seq 50); do kill -0 "$manager" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$manager" 2>/dev/null
}
trap cleanup EXIT

for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && break; sleep 0.1; done
[ -S "$XDG_RUNTIME_DIR/systemd/private" ] || { echo "ERROR=manager did not start: $(tr "\n" " " < "$XDG_RUNTIME_DIR/manager.log" | tail -c 600)"; exit 1; }

systemctl --user start countdownd.socket
echo "SOCKET_ACTIVE=$(systemctl --user is-active countdownd.socket)"
echo "SERVICE_BEFORE=$(systemctl --user is-active countdownd.service)"
echo "SOCKET_PATH_EXISTS=$([ -S "$XDG_RUNTIME_DIR/countdownd/countdownd.sock" ] && echo yes || echo no)"

# The first connection activates the service; cdctl uses its default socket path.
output=$("$bin_dir/cdctl" start tea 1h 2>&1)
status=$?
echo "CDCTL_START=$output"
echo "CDCTL_START_STATUS=$status"
for _ in $(seq 50); do
    [ "$(systemctl --user is-active countdownd.service)" = active ] && break
    sleep 0.1
done
echo "SERVICE_AFTER=$(systemctl --user is-active countdownd.service)"
echo "CDCTL_LIST=$("$bin_dir/cdctl" list --json 2>&1)"

# STATUS= reaches `systemctl status` (allow the daemon's rate limit to pass).
status_line=""
for _ in $(seq 50); do
    status_line=$(systemctl --user status countdownd.service 2>&1 | grep -m1 'Status:')
    case "$status_line" in *"1 running"*) break ;; esac
    sleep 0.1
done
echo "STATUS_LINE=$status_line"
echo "WATCHDOG_USEC=$(systemctl --user show -p WatchdogUSec --value countdownd.service)"
# The exposure score as the user manager itself sees the unit.
echo "SECURITY=$(systemd-analyze --user security countdownd.service 2>&1 | grep -o 'Overall exposure level for countdownd.service: [0-9.]*' | grep -o '[0-9.]*$')"
# The sandbox is real: home is read-only, the network is private.
pid=$(systemctl --user show -p MainPID --value countdownd.service)
echo "SANDBOX_NET=$(readlink /proc/$pid/ns/net 2>/dev/null)"
echo "HOST_NET=$(readlink /proc/self/ns/net)"

# --then: a transient unit of this manager waits for the countdown and runs the command.
then_output=$("$bin_dir/cdctl" start brew 1500ms --then "touch '$BASE/then-ran'" 2>&1)
echo "THEN_OUTPUT=$(echo "$then_output" | tail -1)"
echo "THEN_EARLY=$([ -e "$BASE/then-ran" ] && echo yes || echo no)"
for _ in $(seq 100); do [ -e "$BASE/then-ran" ] && break; sleep 0.1; done
echo "THEN_RAN=$([ -e "$BASE/then-ran" ] && echo yes || echo no)"

systemctl --user stop countdownd.service 2>/dev/null
echo "SERVICE_STOPPED=$(systemctl --user is-active countdownd.service)"
echo "RESULT=$(systemctl --user show -p Result --value countdownd.service)"
echo "EXIT_STATUS=$(systemctl --user show -p ExecMainStatus --value countdownd.service)"
echo "SOCKET_STILL_ACTIVE=$(systemctl --user is-active countdownd.socket)"

# Socket activation again after a stop: the countdown survived in the state directory.
echo "CDCTL_AFTER_RESTART=$("$bin_dir/cdctl" status tea 2>&1 | tail -1)"
state_dir=$XDG_STATE_HOME/countdownd
[ -d "$state_dir" ] || state_dir=$XDG_CONFIG_HOME/countdownd
echo "STATE_FILES=$(cd "$state_dir" 2>/dev/null && ls | tr "\n" " ")"
echo "DONE=yes"
