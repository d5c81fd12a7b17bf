#!/usr/bin/env bash
# Runs countdownd under a real `systemd --user` manager inside a private mount namespace, and
# prints what it saw as KEY=value lines for the integration test to check.
#
#   unshare --mount bash systemd-user-session.sh BIN_DIR UNIT_DIR
#
# The namespace gets its own /run/systemd (with the system/ directory systemd --user insists on),
# so the host is untouched. Every wait is bounded.
set -u
bin_dir=$1
unit_src=$2

fake=$(mktemp -d)
mkdir "$fake/system"
mount --bind "$fake" /run/systemd || { echo "SKIP=cannot bind-mount over /run/systemd"; exit 0; }

export XDG_RUNTIME_DIR=$(mktemp -d) XDG_CONFIG_HOME=$(mktemp -d) XDG_STATE_HOME=$(mktemp -d)
chmod 700 "$XDG_RUNTIME_DIR"
mkdir -p "$XDG_CONFIG_HOME/systemd/user"
for unit in countdownd.service countdownd.socket; do
    sed "s|@BINDIR@|$bin_dir|g" "$unit_src/$unit" > "$XDG_CONFIG_HOME/systemd/user/$unit"
done
unset COUNTDOWND_SOCKET NOTIFY_SOCKET LISTEN_FDS LISTEN_PID

/lib/systemd/systemd --user >"$XDG_RUNTIME_DIR/manager.log" 2>&1 &
manager=$!
cleanup() {
    systemctl --user exit >/dev/null 2>&1
    for _ in $(seq 50); do kill -0 "$manager" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$manager" 2>/dev/null
    rm -rf "$fake" "$XDG_RUNTIME_DIR" "$XDG_CONFIG_HOME" "$XDG_STATE_HOME"
}
trap cleanup EXIT

for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && break; sleep 0.1; done
[ -S "$XDG_RUNTIME_DIR/systemd/private" ] || { echo "ERROR=manager did not start"; cat "$XDG_RUNTIME_DIR/manager.log"; exit 1; }

systemctl --user start countdownd.socket
echo "SOCKET_ACTIVE=$(systemctl --user is-active countdownd.socket)"
echo "SERVICE_BEFORE=$(systemctl --user is-active countdownd.service)"
echo "SOCKET_PATH_EXISTS=$([ -S "$XDG_RUNTIME_DIR/countdownd/countdownd.sock" ] && echo yes || echo no)"

# The first connection activates the service; cdctl uses its default socket path.
output=$("$bin_dir/cdctl" start tea 1h 2>&1)
status=$?
echo "CDCTL_START=$output"
echo "CDCTL_START_STATUS=$status"
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

systemctl --user stop countdownd.service 2>/dev/null
echo "SERVICE_STOPPED=$(systemctl --user is-active countdownd.service)"
echo "RESULT=$(systemctl --user show -p Result --value countdownd.service)"
echo "EXIT_STATUS=$(systemctl --user show -p ExecMainStatus --value countdownd.service)"
echo "SOCKET_STILL_ACTIVE=$(systemctl --user is-active countdownd.socket)"

# Socket activation again after a stop: the countdown survived in the state directory.
echo "CDCTL_AFTER_RESTART=$("$bin_dir/cdctl" status tea 2>&1 | tail -1)"
echo "DONE=yes"
