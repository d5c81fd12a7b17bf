# fish completion for cdctl: commands, options, and live countdown names from the daemon.
function __cdctl_names
    cdctl __complete names 2>/dev/null
end

set -l commands start status list cancel pause resume extend watch wait help
complete -c cdctl -f
complete -c cdctl -l socket -r -F -d 'the daemon socket'
complete -c cdctl -l no-color -d 'no colour'
complete -c cdctl -s h -l help -d 'show help'
complete -c cdctl -s V -l version -d 'show version'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a start -d 'start a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a status -d 'show countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a list -d 'list countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a cancel -d 'cancel a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a pause -d 'pause a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a resume -d 'resume a countdown'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a extend -d 'add time'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a watch -d 'follow countdowns'
complete -c cdctl -n "not __fish_seen_subcommand_from $commands" -a wait -d 'wait for countdowns'
complete -c cdctl -n "__fish_seen_subcommand_from status cancel pause resume extend watch wait start" -a '(__cdctl_names)'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l replace -d 'restart a running one'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l if-idle -d 'leave a running one alone'
complete -c cdctl -n "__fish_seen_subcommand_from start" -l wait -d 'block until done'
complete -c cdctl -n "__fish_seen_subcommand_from status list watch" -l json -d 'JSON output'
complete -c cdctl -n "__fish_seen_subcommand_from status list" -l format -r -d 'template'
complete -c cdctl -n "__fish_seen_subcommand_from status" -l follow -d 'print on every change'
