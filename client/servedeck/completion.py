"""Shell completion for bash and zsh, written from the parser itself so it never drifts:
commands, their verbs, and each verb's options."""

from __future__ import annotations

import argparse


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(
        option
        for action in parser._actions
        if action.help is not argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    )


def words(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """What may follow each path of words: "" (the first word), "app", "app get", ..."""
    table: dict[str, list[str]] = {}

    def walk(path: str, node: argparse.ArgumentParser) -> None:
        children = _subparsers(node)
        table[path] = sorted(children) + _options(node)
        for name, child in children.items():
            walk(f"{path} {name}".strip(), child)

    walk("", parser)
    return table


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = words(parser)
    if shell == "bash":
        cases = "\n".join(
            f'        "{path}") choices="{" ".join(found)}" ;;' for path, found in table.items()
        )
        return f"""# servedeck completion for bash: eval "$(servedeck completion bash)"
_servedeck() {{
    local cur sd_path word i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    sd_path=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ $word == -* ]] && continue
        case "${{sd_path:+$sd_path }}$word" in
{_bash_known(table)}
        esac
    done
    local choices=""
    case "$sd_path" in
{cases}
    esac
    if [[ $cur != -* ]]; then
        case "$sd_path" in
            "app apply"|"app render")
                COMPREPLY=($(compgen -f -- "$cur"))
                [[ -n $COMPREPLY ]] && return ;;
        esac
    fi
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
}}
complete -o default -F _servedeck servedeck
"""
    cases = "\n".join(
        f'        "{path}") choices=({" ".join(found)}) ;;' for path, found in table.items()
    )
    return f"""#compdef servedeck
# servedeck completion for zsh: servedeck completion zsh > "${{fpath[1]}}/_servedeck"
# (or, in ~/.zshrc after compinit: source <(servedeck completion zsh))
_servedeck() {{
    local sd_path="" word i
    local -a choices
    for ((i = 2; i < CURRENT; i++)); do
        word="${{words[i]}}"
        [[ $word == -* ]] && continue
        case "${{sd_path:+$sd_path }}$word" in
{_zsh_known(table)}
        esac
    done
    case "$sd_path" in
{cases}
    esac
    if [[ ${{words[CURRENT]}} != -* ]] && [[ $sd_path == "app apply" || $sd_path == "app render" ]]
    then
        _files
        return
    fi
    compadd -- $choices
}}
# Autoloaded from fpath, this file is _servedeck's body: its first call lands here, so complete
# now. Sourced or eval'ed, register it.
if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _servedeck "$@"
else
    compdef _servedeck servedeck
fi
"""


def _bash_known(table: dict[str, list[str]]) -> str:
    known = [path for path in table if path]
    pattern = "|".join(f'"{path}"' for path in known)
    return f'            {pattern}) sd_path="${{sd_path:+$sd_path }}$word" ;;'


_zsh_known = _bash_known
