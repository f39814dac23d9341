#!/usr/bin/env bash
# Runs the whole suite. pytest exits 5 when no test ran; that is a failure here, never a success.
#
# With no arguments the suite runs as two pytest processes side by side (VF_TEST_JOBS=1: one), split
# by the expensive things they share: the hub's side (PostgreSQL, S3, hubs, the original's wheels in
# throwaway venvs, sandboxes) and the model's side (real vLLM, torch, torchrun). No session fixture,
# cache folder or server is used by both halves, and each has its own pytest base folder. Much of
# the suite waits on processes (servers starting, installers, sandboxes), so on two cores the halves
# overlap instead of queueing. Arguments are passed to a single pytest, as before.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest --durations=25)

verdict() {  # $1: pytest's exit status
  if [ "$1" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
  fi
}

jobs=${VF_TEST_JOBS:-2}
if [ "$#" -gt 0 ] || [ "$jobs" -lt 2 ]; then
  "${PYTEST[@]}" "$@"
  rc=$?
  verdict "$rc"
  exit "$rc"
fi

HUB_SIDE=(tests/hub tests/hubclient tests/support tests/v1 tests/compat tests/sandbox)
MODEL_SIDE=(tests/train tests/cli tests/environments tests/sdk tests/clients environments)
# Every test folder is in one half: a new folder fails here until it is given one.
if compgen -G "tests/test_*.py" > /dev/null; then
  echo "error: tests/ holds test files of its own; put them in a folder of one half" >&2
  exit 2
fi
for d in tests/*/; do
  d=${d%/}
  case " ${HUB_SIDE[*]} ${MODEL_SIDE[*]} " in
    *" $d "*) ;;
    *) if compgen -G "$d/test_*.py" > /dev/null; then
         echo "error: $d is in neither half of scripts/run-tests.sh" >&2
         exit 2
       fi ;;
  esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/vf-tests-XXXXXX")
# Both halves run in the background, so a signal reaches this script while it waits. Ctrl-C at a
# terminal reaches both pytest processes by itself; SIGTERM (a CI timeout) is passed on to them as
# SIGINT. Each pytest stops and runs its teardowns (servers stopped, folders removed); the script
# waits for them and exits 130.
pids=()
stop() {  # $1: pass SIGINT on to the halves
  trap - INT TERM
  if [ "$1" = pass ]; then
    kill -INT "${pids[@]}" 2>/dev/null
  fi
  wait
  rm -rf "$work"
  exit 130
}
trap 'stop keep' INT
trap 'stop pass' TERM
# A background command of a script starts with SIGINT and SIGQUIT ignored, and every process it
# starts would inherit that (a test of Ctrl-C handling would see SIGINT ignored): put them back.
half() {  # $1: base folder name; the rest: test paths
  local name=$1
  shift
  exec .venv/bin/python -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT):
    signal.signal(s, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' \
    "${PYTEST[@]:3}" -p no:cacheprovider --basetemp="$work/$name" "$@"
}
echo "==> two pytest processes: the hub's side (log below when it ends) and the model's side (here)"
half hub "${HUB_SIDE[@]}" > "$work/hub.log" 2>&1 &
pids+=($!)
half model "${MODEL_SIDE[@]}" &
pids+=($!)
wait "${pids[1]}"
model_rc=$?
wait "${pids[0]}"
hub_rc=$?
echo
echo "==> the hub's side: ${HUB_SIDE[*]}"
cat "$work/hub.log"
rm -rf "$work"
verdict "$model_rc"
verdict "$hub_rc"
echo "==> model's side: exit $model_rc; hub's side: exit $hub_rc"
if [ "$model_rc" -ne 0 ]; then exit "$model_rc"; fi
exit "$hub_rc"
