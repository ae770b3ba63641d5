#!/usr/bin/env bash
# check-layout.sh - fails when the tree stops showing its architecture (ARCHITECTURE.md):
#
#  1. a common/ folder includes the header of a higher layer; the layers, lowest first:
#     base io job dataplane control compute ml sharding. psflow/NAME.h belongs to the folder
#     that holds NAME.c (HEADER_ONLY below names the headers without one);
#  2. common/ includes a role (ps/ worker/ coordinator/ agent/ serve/ cli/) or anything else that is
#     not a psflow/ header or a file next to the including one;
#  3. a role includes a role it must not: ps, worker and coordinator include no other role, serve
#     only the worker's data-plane client (worker/link.h, worker/rows.h: psflow serve --ps),
#     agent may include ps, worker and serve, cli may include anything; a role names another
#     folder's header by its path ("ps/server.h"), never by a bare name;
#  4. a CMakeLists.txt (or .cmake file) uses file(GLOB ...): sources are listed by name;
#  5. two C files, or two headers, share a basename; a private header (outside
#     common/include/psflow/, tests/ and bench/) is neither NAME.h beside its NAME.c nor
#     MODULE_internal.h, the one name for a header that several files of a module share;
#  6. the C files of one folder call each other in a circle (scripts/layout_calls.py): a
#     folder's files form layers, each calling only files below it;
#  7. a function outside tests/ and bench/ is longer than FUNCTION_MAX_LINES lines;
#  8. ARCHITECTURE.md does not name a folder of the tree, or a file outside tests/ (and
#     outside web/'s npm files): the map is complete.
#
# Length of a file is advice, not a rule: a C file over C_ADVICE_LINES lines or a dashboard
# file over WEB_ADVICE_LINES is listed with a reminder to split it by job - along the
# direction of its calls, never by size alone (rule 6 catches a split that makes a circle).
#
# usage: scripts/check-layout.sh [ROOT]     (default: the repository this script is in)
# Exit 0 when the layout holds, 1 after printing one line per problem.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$(cd "$here/.." && pwd)}
cd "$root"

LAYERS=(base io job dataplane control compute ml sharding)
# psflow/NAME.h without a NAME.c - header-only, or one module in files named by their jobs -
# and its folder.
HEADER_ONLY=(tensor:base version:base checkpoint:sharding)
ROLES=(ps worker coordinator agent serve cli)
FUNCTION_MAX_LINES=120
C_ADVICE_LINES=1000
WEB_ADVICE_LINES=600

problems=0
problem() {
  echo "check-layout: $*"
  problems=$((problems + 1))
}

# The files to check: what git tracks or would track (untracked, not ignored), else all.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard | grep -v '^tests/data/' | sort -u)
else
  mapfile -t files < <(find . -type f -not -path './build*' -not -path '*/node_modules/*' \
    -not -path './tests/data/*' -not -path './.git/*' | sed 's|^\./||' | sort)
fi
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
files=("${existing[@]}")

# Every loop below runs in this shell, without a process per file (the check runs as a test
# on loaded 2-core machines).
declare -A layer_i # layer name -> its position in LAYERS
for i in "${!LAYERS[@]}"; do layer_i[${LAYERS[$i]}]=$i; done

# The folder under common/ of each C module, by its name.
declare -A module_folder
for f in "${files[@]}"; do
  case $f in common/*/*.c)
    name=${f##*/}
    rest=${f#common/}
    module_folder[${name%.c}]=${rest%%/*}
    ;;
  esac
done

# --- which folder each psflow/ header belongs to -------------------------------------------
declare -A owner
for f in "${files[@]}"; do
  case $f in
    common/include/psflow/*.h | common/include/psflow/*.h.in) ;;
    *) continue ;;
  esac
  name=${f##*/}
  name=${name%.in}
  name=${name%.h}
  folder=${module_folder[$name]:-}
  for pair in "${HEADER_ONLY[@]}"; do
    [ "${pair%%:*}" = "$name" ] && folder=${pair#*:}
  done
  if [ -z "$folder" ] || [ -z "${layer_i[$folder]:-}" ]; then
    problem "$f: no module $name.c in a common/ layer folder (a header-only one goes in HEADER_ONLY)"
    continue
  fi
  owner[psflow/$name.h]=$folder
done

# The names each C file's and header's #include "..." lines give, read in one pass; includes
# FILE prints them one per line.
declare -A included
while IFS=$'\t' read -r f inc; do
  included[$f]+="$inc"$'\n'
done < <(for f in "${files[@]}"; do case $f in *.c | *.h) printf '%s\0' "$f" ;; esac; done |
  xargs -0 -r awk 'match($0, /^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"/) {
      s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s)
      print FILENAME "\t" s }')
includes() {
  printf '%s' "${included[$1]:-}"
}

is_role() {
  local r
  for r in "${ROLES[@]}"; do [ "$r" = "$1" ] && return 0; done
  return 1
}

for f in "${files[@]}"; do
  case $f in *.c | *.h) ;; *) continue ;; esac
  top=${f%%/*}
  [ "$top" != "$f" ] || continue # files at the root: none are C
  dir=${f%/*}

  # --- 1, 2: common/ ------------------------------------------------------------------------
  if [ "$top" = common ]; then
    if [[ $f == common/include/psflow/* ]]; then
      mine=${owner[psflow/${f##*/}]:-}
    else
      mine=${f#common/}
      mine=${mine%%/*}
    fi
    mine_i=${layer_i[$mine]:-}
    if [ -z "$mine_i" ]; then
      problem "$f: common/$mine/ is no layer (${LAYERS[*]})"
      continue
    fi
    while read -r inc; do
      case $inc in
        psflow/*)
          theirs=${owner[$inc]:-}
          if [ -z "$theirs" ]; then
            [ "$inc" = psflow/version.h ] || problem "$f includes $inc, which is no psflow header"
          elif [ "${layer_i[$theirs]}" -gt "$mine_i" ]; then
            problem "$f ($mine/) includes $inc of $theirs/, a higher layer"
          fi
          ;;
        */*)
          if is_role "${inc%%/*}"; then
            problem "$f ($mine/) includes $inc: common/ never includes a role"
          else
            problem "$f ($mine/) includes $inc: common/ includes psflow/ headers and its own files"
          fi
          ;;
        *) [ -f "$dir/$inc" ] || problem "$f includes \"$inc\", which is not next to it" ;;
      esac
    done < <(includes "$f")
    continue
  fi

  # --- 3: roles -------------------------------------------------------------------------------
  is_role "$top" || continue
  while read -r inc; do
    case $inc in
      psflow/*) ;;
      */*)
        other=${inc%%/*}
        is_role "$other" || continue
        [ "$other" = "$top" ] && continue
        [ "$top" = cli ] && continue
        if [ "$top" = agent ] && { [ "$other" = ps ] || [ "$other" = worker ] || [ "$other" = serve ]; }; then
          continue
        fi
        if [ "$top" = serve ] && { [ "$inc" = worker/link.h ] || [ "$inc" = worker/rows.h ]; }; then
          continue
        fi
        problem "$f ($top/) includes $inc: $top/ must not include $other/"
        ;;
      *)
        [ -f "$dir/$inc" ] && [ "$dir" = "$top" ] &&
          problem "$f includes \"$inc\" by a bare name: write \"$top/$inc\""
        [ -f "$dir/$inc" ] || problem "$f includes \"$inc\": name a role's header by its path"
        ;;
    esac
  done < <(includes "$f")
done

# --- 4: no GLOB in the build --------------------------------------------------------------------
for f in "${files[@]}"; do
  case $(basename "$f") in CMakeLists.txt | *.cmake) ;; *) continue ;; esac
  while IFS= read -r line; do
    problem "$f:$line: file(GLOB ...): list the sources by name"
  done < <(grep -niE 'file[[:space:]]*\([[:space:]]*GLOB' "$f" | cut -d: -f1)
done

# --- 5: one C file and one header per basename; private headers named by their job ----------
while read -r base; do
  problem "files share the name $base: $(printf '%s\n' "${files[@]}" | grep -E "(^|/)$base\$" | tr '\n' ' ')"
done < <(printf '%s\n' "${files[@]}" | grep -E '\.(c|h)$' | sed 's|.*/||' | sort | uniq -d)
for f in "${files[@]}"; do
  case $f in common/include/psflow/* | tests/* | bench/*) continue ;; *.h) ;; *) continue ;; esac
  base=${f%.h}
  case $base in *_internal) continue ;; esac
  [ -f "$base.c" ] || [ -f "$base.cu" ] ||
    problem "$f: a private header is NAME.h beside NAME.c, or MODULE_internal.h when several files share it"
done

# --- 6, 7: no circle between the C files of a folder; no function too long to read ------------
c_files=()
production=()
for f in "${files[@]}"; do
  case $f in *.c | *.cu) ;; *) continue ;; esac
  c_files+=("$f")
  case $f in tests/* | bench/*) ;; *) production+=("$f") ;; esac
done
# layout_calls.py exits 1 after printing what it found; any other failure is a problem too.
layout_calls() {
  local rc=0
  python3 "$here/layout_calls.py" "$@" || rc=$?
  [ "$rc" -le 1 ] || echo "scripts/layout_calls.py stopped with exit code $rc"
}
while IFS= read -r line; do
  problem "$line"
done < <(layout_calls "${c_files[@]}")
while IFS= read -r line; do
  problem "$line"
done < <(layout_calls --max-function-lines "$FUNCTION_MAX_LINES" "${production[@]}")

# --- 8: ARCHITECTURE.md names every folder and every file outside tests/ ------------------------
if [ -f ARCHITECTURE.md ]; then
  arch=$(<ARCHITECTURE.md)
  declare -A folders
  for f in "${files[@]}"; do
    case $f in */node_modules/* | .*) continue ;; esac
    case $f in */*) folders[${f%/*}]=1 ;; esac
    case $f in
      tests/* | web/package*.json | */package-lock.json | */package.json | .* | */.*) continue ;;
      */*) [[ $arch == *"${f##*/}"* ]] ||
        problem "$f: ARCHITECTURE.md does not say what this file does" ;;
    esac
  done
  for d in "${!folders[@]}"; do
    [[ $arch == *"$d/"* ]] || problem "$d/: ARCHITECTURE.md does not name this folder"
  done
fi

# --- advice: a file long enough to hold more than one job ------------------------------------------
advised=()
for f in "${files[@]}"; do
  case $f in
    web/node_modules/* | web/package*.json) ;;
    web/* | *.c | *.h | *.cu) advised+=("$f") ;;
  esac
done
while read -r lines f; do
  case $f in
    total) continue ;;
    web/*) limit=$WEB_ADVICE_LINES ;;
    *) limit=$C_ADVICE_LINES ;;
  esac
  [ "$lines" -le "$limit" ] ||
    echo "check-layout: advice: $f has $lines lines; if it does more than one job, split it by job"
done < <([ ${#advised[@]} -eq 0 ] || wc -l "${advised[@]}")

if [ "$problems" -gt 0 ]; then
  echo "check-layout: $problems problem(s); see ARCHITECTURE.md for the layout"
  exit 1
fi
echo "check-layout: ok (${#files[@]} files: layers ${LAYERS[*]}; roles ${ROLES[*]}; no circle;" \
  "functions <= $FUNCTION_MAX_LINES lines; unique C and header names; ARCHITECTURE.md complete)"
