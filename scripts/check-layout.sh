#!/usr/bin/env bash
# check-layout.sh - fails when the tree stops showing its architecture (ARCHITECTURE.md):
#
#  1. a common/ folder includes the header of a higher layer; the layers, lowest first:
#     base io job dataplane control compute ml sharding. psflow/NAME.h belongs to the folder
#     that holds NAME.c (HEADER_ONLY below names the headers without one);
#  2. common/ includes a role (ps/ worker/ coordinator/ agent/ cli/) or anything else that is
#     not a psflow/ header or a file next to the including one;
#  3. a role includes a role it must not: ps, worker and coordinator include no other role,
#     agent may include ps and worker, cli may include anything; a role names another
#     folder's header by its path ("ps/server.h"), never by a bare name;
#  4. a CMakeLists.txt (or .cmake file) uses file(GLOB ...): sources are listed by name;
#  5. two C files share a basename;
#  6. a file does more than one job, as its length shows: a C file (.c, .h) over
#     C_MAX_LINES lines, a dashboard file (web/, but not node_modules/ or npm's
#     package*.json) over WEB_MAX_LINES.
#
# usage: scripts/check-layout.sh [ROOT]     (default: the repository this script is in)
# Exit 0 when the layout holds, 1 after printing one line per problem.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

LAYERS=(base io job dataplane control compute ml sharding)
# psflow/NAME.h without a NAME.c - header-only, or one module in files named by their jobs -
# and its folder.
HEADER_ONLY=(tensor:base version:base checkpoint:sharding)
ROLES=(ps worker coordinator agent cli)
C_MAX_LINES=1200
WEB_MAX_LINES=600

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

layer_index() { # layer_index NAME -> its position in LAYERS, or nothing
  local i
  for i in "${!LAYERS[@]}"; do [ "${LAYERS[$i]}" = "$1" ] && echo "$i" && return; done
}

# --- which folder each psflow/ header belongs to -------------------------------------------
declare -A owner
for f in "${files[@]}"; do
  case $f in
    common/include/psflow/*.h | common/include/psflow/*.h.in) ;;
    *) continue ;;
  esac
  name=$(basename "$f")
  name=${name%.in}
  name=${name%.h}
  folder=
  for f2 in "${files[@]}"; do
    case $f2 in common/*/"$name".c | common/*/*/"$name".c)
      folder=${f2#common/}
      folder=${folder%%/*}
      ;;
    esac
  done
  for pair in "${HEADER_ONLY[@]}"; do
    [ "${pair%%:*}" = "$name" ] && folder=${pair#*:}
  done
  if [ -z "$folder" ] || [ -z "$(layer_index "$folder")" ]; then
    problem "$f: no module $name.c in a common/ layer folder (a header-only one goes in HEADER_ONLY)"
    continue
  fi
  owner[psflow/$name.h]=$folder
done

# includes FILE: the names its #include "..." lines give, one per line
includes() {
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
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
  dir=$(dirname "$f")

  # --- 1, 2: common/ ------------------------------------------------------------------------
  if [ "$top" = common ]; then
    if [[ $f == common/include/psflow/* ]]; then
      mine=${owner[psflow/$(basename "$f")]:-}
    else
      mine=${f#common/}
      mine=${mine%%/*}
    fi
    mine_i=$(layer_index "$mine")
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
          elif [ "$(layer_index "$theirs")" -gt "$mine_i" ]; then
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
        if [ "$top" = agent ] && { [ "$other" = ps ] || [ "$other" = worker ]; }; then
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

# --- 5: one C file per basename -------------------------------------------------------------------
while read -r base; do
  problem "C files share the name $base: $(printf '%s\n' "${files[@]}" | grep -E "(^|/)$base\$" | tr '\n' ' ')"
done < <(printf '%s\n' "${files[@]}" | grep '\.c$' | xargs -n1 basename | sort | uniq -d)

# --- 6: no file too long to do one job ------------------------------------------------------------
for f in "${files[@]}"; do
  case $f in
    web/node_modules/* | web/package*.json) continue ;;
    web/*) limit=$WEB_MAX_LINES ;;
    *.c | *.h) limit=$C_MAX_LINES ;;
    *) continue ;;
  esac
  lines=$(wc -l <"$f")
  [ "$lines" -le "$limit" ] || problem "$f: $lines lines, more than $limit: split it by job"
done

if [ "$problems" -gt 0 ]; then
  echo "check-layout: $problems problem(s); see ARCHITECTURE.md for the layout"
  exit 1
fi
echo "check-layout: ok (${#files[@]} files: layers ${LAYERS[*]}; roles ${ROLES[*]};" \
  "C files <= $C_MAX_LINES lines, web/ files <= $WEB_MAX_LINES)"
