# Sourced by the ladder scripts (scripts/*-ladder.sh): one kiln
# build per rung, sm_90a only and without tests to keep the builds short.
#   ladder_wanted NAME            true when the script's arguments ($WANT) name NAME, or none
#   ladder_build DIR DEFS [ARGS]  configures DIR with KILN_TUNE_DEFS=DEFS and builds it (ARGS go
#                                 to cmake --build, e.g. --target kiln-bench)
#   ladder_slim DIR DEST          copies DIR's libkiln and kiln-bench into DEST (~13 MB: several
#                                 rungs fit the device tool's 64 MiB carry together)
#   ladder_rung NAME DEFS [SRC]   kiln-bench built from SRC (default: this tree) into
#                                 build-ladder/NAME, slimmed into build-ladder/slim/NAME
#   ladder_source DIR COMMIT "PATCHES"  a worktree of COMMIT at DIR with PATCHES (paths from the
#                                 repository root) applied in order; an existing DIR is kept
#   ladder_step PREFIX NAME DEFS [COMMIT "PATCHES"]  when the script's arguments want NAME, rung
#                                 PREFIX-NAME with KILN_TUNE_DEFS=DEFS, from this tree or (COMMIT
#                                 given, not ".") from a worktree /tmp/kiln-PREFIX-NAME of it
ladder_wanted() {
  [ -z "$WANT" ] && return 0
  case " $WANT " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}
ladder_build() {
  dir=$1
  defs=$2
  shift 2
  cmake -S . -B "$dir" -DKILN_CUDA_ARCHS=90a -DKILN_PTX_ARCH= -DKILN_BUILD_TESTS=OFF "-DKILN_TUNE_DEFS=$defs" >/dev/null
  cmake --build "$dir" -j2 "$@" >/dev/null
}
ladder_slim() {
  rm -rf "$2" && mkdir -p "$2/tools"
  cp -a "$1"/libkiln.so* "$2/"
  cp "$1/tools/kiln-bench" "$2/tools/"
}
ladder_rung() {
  _rung_root=$(pwd)
  (cd "${3:-.}" && ladder_build "$_rung_root/build-ladder/$1" "$2" --target kiln-bench)
  ladder_slim "build-ladder/$1" "build-ladder/slim/$1"
  echo "built build-ladder/slim/$1 (${3:-.} $2): $(du -sh "build-ladder/slim/$1" | cut -f1)"
}
ladder_source() {
  _src_root=$(pwd)
  if [ ! -d "$1" ]; then
    git worktree add -q --detach "$1" "$2"
    for patch in $3; do (cd "$1" && git apply "$_src_root/$patch"); done
  fi
}
ladder_step() {
  ladder_wanted "$2" || return 0
  _step_src=.
  if [ -n "${4:-}" ] && [ "$4" != . ]; then
    _step_src=/tmp/kiln-$1-$2
    ladder_source "$_step_src" "$4" "${5:-}"
  fi
  ladder_rung "$1-$2" "$3" "$_step_src"
}
