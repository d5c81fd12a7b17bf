# bash completion for cdctl                                   -*- shell-script -*-
# Commands, options, and live countdown names from the running daemon (cdctl __complete names).

_cdctl_names() {
    local socket=$1
    cdctl ${socket:+--socket "$socket"} __complete names 2>/dev/null
}

_cdctl() {
    local cur prev command="" socket="" i word
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        case $word in
            --socket) socket=${COMP_WORDS[i+1]}; ((i++)) ;;
            --socket=*) socket=${word#--socket=} ;;
            --format) ((i++)) ;;
            -*) ;;
            *) [[ -z $command ]] && command=$word ;;
        esac
    done

    case $prev in
        --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --format) COMPREPLY=($(compgen -W "'{name} {remaining}' '{name} {bar} {remaining}' '{remaining_s}'" -- "$cur")); return ;;
    esac

    local common="--socket --no-color --help --version"
    if [[ -z $command ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$common" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "start status list cancel pause resume extend watch wait help" -- "$cur"))
        fi
        return
    fi

    local options=""
    case $command in
        start) options="--replace --if-idle --wait" ;;
        status) options="--json --format --follow" ;;
        list) options="--json --format" ;;
        watch) options="--json" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options $common" -- "$cur"))
        return
    fi
    case $command in
        status|cancel|pause|resume|extend|watch|wait|start)
            COMPREPLY=($(compgen -W "$(_cdctl_names "$socket")" -- "$cur")) ;;
    esac
}

complete -F _cdctl cdctl
