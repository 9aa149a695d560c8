#!/usr/bin/env bash
# Installs or builds the Redis and Valkey servers the test matrix runs against,
# all from Debian's package archive (the apt registry this machine and CI
# reach; nothing is downloaded from anywhere else), and writes the registry the
# tests read.
#
#   scripts/servers.sh                      all five servers
#   scripts/servers.sh redis-7 valkey-8.0   only these
#   scripts/servers.sh --registry [ID...]   the same, then print these servers'
#                                           registry lines (not the path) on stdout
#   scripts/servers.sh --list               print the registry
#
#   id          version  how
#   redis-6     6.0.x    built from Debian's bullseye source package (redis/bullseye)
#   redis-7     7.0.x    bookworm binary package: redis-server, redis-tools (/usr/bin)
#   redis-8     8.0.x    built from Debian's trixie source package (redis/trixie)
#   valkey-8.0  8.0.x    bookworm-backports binary package: valkey-server, valkey-tools (/usr/bin)
#   valkey-8.1  8.1.x    built from Debian's trixie source package (valkey/trixie)
#
# Built servers are cached outside the work tree, one directory per server and
# exact version: $REDISSON_LOCK_SERVER_CACHE (default
# ~/.cache/redisson-lock/servers)/redis-8.0.2/bin/redis-server. The registry,
# $CACHE/servers.tsv, has one line per server, "id<TAB>version<TAB>binary",
# where version is what the binary itself reports; it is rewritten atomically
# at the end of each run (ids not asked for keep their previous line). Its path
# is the one line on stdout (--registry: the lines instead); progress goes to
# stderr.
#
# Which version a built server is: when the apt source for its suite is already
# configured, the version in apt's local index (no network), so a newer Debian
# upload gets built into a new directory after an `apt-get update`; when it is
# not (a fresh CI machine that restored the cache), the newest cached build of
# the series, without touching apt. apt is touched only for a server that must
# be installed or built: the sources it needs are added first, and `apt-get
# update` runs once, when a source was added or apt's lists lack a package.
#
# apt sources it adds, one file each, idempotently, with the archive URI of the
# machine's own bookworm source (read at run time):
#   /etc/apt/sources.list.d/redisson-lock-bookworm-backports.sources  (deb: backports
#     is NotAutomatic, so nothing installs from it unless asked with -t)
#   /etc/apt/sources.list.d/redisson-lock-trixie-src.sources          (deb-src only)
#   /etc/apt/sources.list.d/redisson-lock-bullseye-src.sources        (deb-src only)
# deb-src entries provide source packages only, so `apt-get install` on the
# machine is unaffected. Note that installing Debian's redis-server or
# valkey-server package starts its service on port 6379 on a machine running
# systemd (not in a container).
#
# Environment: REDISSON_LOCK_SERVER_CACHE (cache directory),
# REDISSON_LOCK_BUILD_JOBS (make -j, default: the number of CPUs).
set -euo pipefail

ALL_IDS=(redis-6 redis-7 redis-8 valkey-8.0 valkey-8.1)
CACHE=${REDISSON_LOCK_SERVER_CACHE:-${HOME:?HOME is not set}/.cache/redisson-lock/servers}
REGISTRY=$CACHE/servers.tsv
JOBS=${REDISSON_LOCK_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
# Plain server builds: no TLS, no systemd notification, libc malloc (no
# jemalloc build), and (Redis 8) none of the bundled modules.
MAKE_FLAGS=(BUILD_TLS=no USE_SYSTEMD=no MALLOC=libc BUILD_WITH_MODULES=no)
APT_SOURCES_DIR=/etc/apt/sources.list.d
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

say() { printf 'servers: %s\n' "$*" >&2; }
die() { printf 'servers: error: %s\n' "$*" >&2; exit 1; }
usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root for: $* (run as root or install sudo)"
  fi
}

# ---------------------------------------------------------------- arguments
list=0
print_lines=0
ids=()
for arg in "$@"; do
  case $arg in
    --list) list=1 ;;
    --registry) print_lines=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) printf 'servers: unknown option %s (try --help)\n' "$arg" >&2; exit 2 ;;
    *)
      known=0
      for id in "${ALL_IDS[@]}"; do
        if [ "$arg" = "$id" ]; then known=1; fi
      done
      if [ "$known" = 0 ]; then
        printf 'servers: unknown server id %q; known ids: %s\n' "$arg" "${ALL_IDS[*]}" >&2
        exit 2
      fi
      dup=0
      for id in ${ids[@]+"${ids[@]}"}; do
        if [ "$arg" = "$id" ]; then dup=1; fi
      done
      if [ "$dup" = 0 ]; then ids+=("$arg"); fi
      ;;
  esac
done
if [ "$list" = 1 ]; then
  if [ "${#ids[@]}" != 0 ] || [ "$print_lines" = 1 ]; then
    echo "servers: --list takes no server ids and no --registry" >&2; exit 2
  fi
  [ -f "$REGISTRY" ] || die "no registry at $REGISTRY yet (run ${0##*/} first)"
  cat "$REGISTRY"
  exit 0
fi
[ "${#ids[@]}" -gt 0 ] || ids=("${ALL_IDS[@]}")

if ! mkdir -p "$CACHE" 2>/dev/null || [ ! -w "$CACHE" ]; then
  die "cannot write to $CACHE (set REDISSON_LOCK_SERVER_CACHE to a directory of yours)"
fi
# One run at a time per cache (two CI jobs or test runs sharing a home).
{ exec 9>>"$CACHE/.lock"; } 2>/dev/null ||
  die "cannot write to $CACHE/.lock (set REDISSON_LOCK_SERVER_CACHE to a directory of yours)"
if ! flock -n 9; then
  say "waiting for another run holding $CACHE/.lock"
  flock 9
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/redisson-lock-servers.XXXXXX")
trap 'rm -rf "$work" ${staging:+"$staging"} ${registry_tmp:+"$registry_tmp"}' EXIT

# ---------------------------------------------------------------- helpers
# The version a server binary reports: "Redis server v=8.0.2 sha=…" -> 8.0.2.
version_of() {
  [ -x "$1" ] || return 1
  "$1" --version 2>/dev/null | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p' | head -n1
}
# in_series 8.0.2 8.0 -> true
in_series() { case $1 in "$2".*) return 0 ;; *) return 1 ;; esac; }

apt_log=$work/apt.log
# apt-get as root, quiet; its output is shown only when it fails.
apt_get() {
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@" >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    die "apt-get $* failed"
  fi
}
updated=0
apt_update() {
  [ "$updated" = 1 ] && return 0
  local started=$SECONDS
  apt_get update
  say "apt-get update ($((SECONDS - started))s)"
  updated=1
}
sources_added=0
archive=""
# The archive URI of the machine's own Debian bookworm source, whatever host it
# names (deb.debian.org, a mirror, a proxy), from apt's configured index
# targets: "bookworm main" whose Release says Origin: Debian (a third-party
# "bookworm main" repository does not qualify), or, when apt has no Release
# files yet (lists removed, as in container images), the first "bookworm main".
archive_uri() {
  # shellcheck disable=SC2016 # apt's own $(FIELD) placeholders
  local uri format='$(REPO_URI)|$(RELEASE)|$(COMPONENT)|$(TARGET_OF)|$(ORIGIN)'
  uri=$({ apt-get indextargets --format "$format"
      apt-get indextargets --no-release-info --format "$format"; } 2>/dev/null |
    awk -F'|' '$2 == "bookworm" && $3 == "main" && $4 == "deb" {
        if ($5 == "Debian") { print $1; found = 1; exit }
        if (fallback == "" && ($5 == "" || $5 ~ /^\$\(/)) fallback = $1
      }
      END { if (!found && fallback != "") print fallback }')
  [ -n "$uri" ] || die "no apt source for Debian bookworm main is configured (apt-get indextargets lists none)"
  printf '%s\n' "${uri%/}"
}
# ensure_source NAME TYPES SUITE: /etc/apt/sources.list.d/redisson-lock-NAME.sources,
# rewritten only when its content would change.
ensure_source() {
  local name=$1 types=$2 suite=$3 file content
  file=$APT_SOURCES_DIR/redisson-lock-$name.sources
  [ -n "$archive" ] || archive=$(archive_uri)
  content="# Added by redisson-lock scripts/servers.sh (test servers); safe to delete.
Types: $types
URIs: $archive
Suites: $suite
Components: main"
  [ -f "$KEYRING" ] && content+=$'\n'"Signed-By: $KEYRING"
  if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then return 0; fi
  say "adding apt source $file ($types $suite)"
  printf '%s\n' "$content" | as_root tee "$file.tmp" >/dev/null
  as_root mv -f "$file.tmp" "$file"
  sources_added=1
  updated=0
}
# Installs the Debian packages providing these commands when they are missing.
need_tools() {
  local missing=() pair cmd pkg
  for pair in "$@"; do
    cmd=${pair%%:*} pkg=${pair#*:}
    if ! command -v "$cmd" >/dev/null && [[ " ${missing[*]-} " != *" $pkg "* ]]; then missing+=("$pkg"); fi
  done
  [ "${#missing[@]}" = 0 ] && return 0
  say "installing ${missing[*]} (bookworm)"
  apt_update
  apt_get install --no-install-recommends "${missing[@]}"
}

# ---------------------------------------------------------------- registry
declare -A line
registry_line() { line[$1]=$1$'\t'$2$'\t'$3; }
if [ -f "$REGISTRY" ]; then
  while IFS=$'\t' read -r rid rv rbin; do
    [ -n "${rid:-}" ] || continue
    # Keep a previous line only while its binary still reports its version.
    if [ "$(version_of "$rbin" || true)" = "$rv" ]; then registry_line "$rid" "$rv" "$rbin"; fi
  done <"$REGISTRY"
fi

# ---------------------------------------------------------------- the servers
# id -> how: "apt SERIES SERVER CLI PACKAGES... [-- APT-OPTIONS...]" or
# "src SERIES NAME PKG SUITE" (NAME: binary prefix, redis or valkey).
declare -A how=(
  [redis-6]="src 6.0 redis redis bullseye"
  [redis-7]="apt 7.0 /usr/bin/redis-server /usr/bin/redis-cli redis-server redis-tools"
  [redis-8]="src 8.0 redis redis trixie"
  [valkey-8.0]="apt 8.0 /usr/bin/valkey-server /usr/bin/valkey-cli valkey-server valkey-tools -- -t bookworm-backports"
  [valkey-8.1]="src 8.1 valkey valkey trixie"
)
# The apt source a server needs when it has to be installed or built.
source_for() {
  local kind series name pkg suite
  read -r kind series name pkg suite _ <<<"${how[$1]}"
  if [ "$kind" = src ]; then ensure_source "$suite-src" deb-src "$suite"
  elif [ "$1" = valkey-8.0 ]; then ensure_source bookworm-backports deb bookworm-backports
  fi
}

# Upstream version of PKG in SUITE's source index, from the .orig tarball's
# name (redis_8.0.2.orig.tar.gz -> 8.0.2, valkey_8.1.1+dfsg1.orig.tar.xz ->
# 8.1.1); fails when apt's local lists do not know it. No network.
indexed_version() {
  local pkg=$1 suite=$2 orig v
  # --print-uris lines: 'URI' FILENAME SIZE HASH
  orig=$(apt-get source --print-uris -qq "$pkg/$suite" 2>/dev/null |
    awk '$2 ~ /\.orig\.tar\.[a-z0-9]+$/ { print $2; exit }') || return 1
  [ -n "$orig" ] || return 1
  v=${orig#"${pkg}_"}
  v=${v%%.orig.tar.*}
  printf '%s\n' "${v%%[+~]*}"
}
# The cached NAME-VERSION server binary, if it reports VERSION.
cached_bin() {
  local bin=$CACHE/$1-$2/bin/$1-server
  if [ "$(version_of "$bin" || true)" = "$2" ]; then printf '%s\n' "$bin"; else return 1; fi
}
# Newest version of NAME in SERIES with a good cached binary.
newest_cached() {
  local name=$1 series=$2 dir v
  for dir in "$CACHE/$name-$series".*; do
    v=${dir##*/"$name"-}
    if [ -d "$dir" ] && cached_bin "$name" "$v" >/dev/null; then printf '%s\n' "$v"; fi
  done | sort -V | tail -n1
}

# present ID: registers ID and succeeds when it is there without any apt work:
# the Debian package installed, or the build cached.
present() {
  local id=$1 kind series a b pkg suite v want bin src
  read -r kind series a b pkg suite _ <<<"${how[$id]}"
  if [ "$kind" = apt ]; then
    v=$(version_of "$a" || true)
    if [ -n "$v" ] && in_series "$v" "$series" && [ -x "$b" ]; then
      say "$id $v installed ($a)"
      registry_line "$id" "$v" "$a"
      return 0
    fi
    return 1
  fi
  read -r kind series a pkg suite _ <<<"${how[$id]}"
  src=$APT_SOURCES_DIR/redisson-lock-$suite-src.sources
  if [ -f "$src" ]; then
    # The suite is configured: the version in apt's local index decides.
    want=$(indexed_version "$pkg" "$suite" || true)
  else
    # It is not (a fresh machine that restored the cache): the cache decides.
    want=$(newest_cached "$a" "$series")
  fi
  if [ -n "$want" ] && bin=$(cached_bin "$a" "$want"); then
    say "$id $want cached ($bin)"
    registry_line "$id" "$want" "$bin"
    return 0
  fi
  return 1
}

# install_apt ID: installs the Debian packages of ID.
install_apt() {
  local id=$1 kind series bin cli rest packages=() opts=() v started=$SECONDS
  read -r kind series bin cli rest <<<"${how[$id]}"
  read -r -a packages <<<"${rest%%--*}"
  if [[ $rest == *--* ]]; then read -r -a opts <<<"${rest#*--}"; fi
  say "$id installing ${packages[*]} from Debian ${opts[*]:-bookworm}"
  apt_update
  apt_get install ${opts[@]+"${opts[@]}"} "${packages[@]}"
  v=$(version_of "$bin" || true)
  [ -n "$v" ] || die "$id: $bin missing or reports no version after installing ${packages[*]}"
  in_series "$v" "$series" || die "$id: $bin reports $v after installing ${packages[*]}, not $series.x"
  say "$id $v installed in $((SECONDS - started))s ($bin)"
  registry_line "$id" "$v" "$bin"
}

staging=""
# build ID: builds ID from its Debian source package into the cache.
build() {
  local id=$1 kind series name pkg suite want bin
  read -r kind series name pkg suite _ <<<"${how[$id]}"
  local srv=$name-server cli=$name-cli
  if [ "$sources_added" = 1 ] || ! want=$(indexed_version "$pkg" "$suite"); then
    apt_update
    want=$(indexed_version "$pkg" "$suite") ||
      die "$id: apt knows no source package $pkg/$suite after apt-get update"
  fi
  in_series "$want" "$series" ||
    die "$id: Debian $suite has $pkg $want, not $series.x; this script needs updating"
  if bin=$(cached_bin "$name" "$want"); then
    say "$id $want cached ($bin)"
    registry_line "$id" "$want" "$bin"
    return 0
  fi

  # Tools first (a bare bookworm machine has none of them): apt-get source
  # needs dpkg-dev; Redis 8's bundled fast_float is C++.
  need_tools gcc:build-essential g++:build-essential make:build-essential \
    dpkg-source:dpkg-dev pkg-config:pkg-config xz:xz-utils
  local dir=$work/$id started=$SECONDS orig v dest
  mkdir -p "$dir/dl" "$dir/src"
  # Run as root, apt-get source downloads as the unprivileged _apt user when
  # that user can write the directory (else unsandboxed as root, with a warning).
  if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then
    chmod 711 "$work" "$dir"
    chown _apt "$dir/dl"
  fi
  # The .dsc and .debian.tar.* of a version that came through the security
  # archive can 404; the .orig tarball (which apt checks against the signed
  # Sources index) is all the build needs.
  (cd "$dir/dl" && apt-get source --download-only -q "$pkg/$suite") >"$dir/source.log" 2>&1 || true
  orig=$(find "$dir/dl" -maxdepth 1 -name "${pkg}_*.orig.tar.*" ! -name '*.asc' | head -n1)
  if [ -z "$orig" ]; then
    cat "$dir/source.log" >&2
    die "$id: apt-get source $pkg/$suite fetched no .orig tarball"
  fi
  if grep -q ' 404 ' "$dir/source.log"; then
    say "$id note: apt-get source got 404 for $(grep ' 404 ' "$dir/source.log" |
      grep -o '[^ /]*\.\(dsc\|debian\.tar\.[a-z]*\)' | sed 's/%2[bB]/+/g' | sort -u | paste -sd ' ');" \
      "the .orig tarball suffices"
  fi
  say "$id building $want from $suite source (${orig##*/}, make -j$JOBS ${MAKE_FLAGS[*]})"
  tar -xf "$orig" -C "$dir/src" --strip-components=1
  if ! make -C "$dir/src" -j"$JOBS" "${MAKE_FLAGS[@]}" >"$dir/build.log" 2>&1; then
    tail -n 40 "$dir/build.log" >&2
    die "$id: make failed (last lines above)"
  fi
  v=$(version_of "$dir/src/src/$srv" || true)
  [ -n "$v" ] || die "$id: the build produced no working src/$srv"
  [ "$v" = "$want" ] || say "$id note: the source package says $want, the binary reports $v"
  in_series "$v" "$series" || die "$id: the built $srv reports $v, not $series.x"

  # Staged next to the cache, then moved into place in one step.
  dest=$CACHE/$name-$v
  staging=$(mktemp -d "$CACHE/.stage-$name-$v.XXXXXX")
  chmod 755 "$staging"
  mkdir -p "$staging/bin"
  cp "$dir/src/src/$srv" "$dir/src/src/$cli" "$staging/bin/"
  # Debug info off (a third of the size); the symbols crash reports use stay.
  if command -v strip >/dev/null; then strip --strip-debug "$staging/bin/$srv" "$staging/bin/$cli"; fi
  ln -s "$srv" "$staging/bin/$name-sentinel"
  printf 'Debian source package %s/%s, %s\nbuilt %s: make %s\n' "$pkg" "$suite" "${orig##*/}" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${MAKE_FLAGS[*]}" >"$staging/SOURCE"
  rm -rf "$dest"
  mv "$staging" "$dest"
  staging=""
  bin=$dest/bin/$srv
  say "$id $v built in $((SECONDS - started))s ($bin)"
  rm -rf "$dir"
  registry_line "$id" "$v" "$bin"
}

# ---------------------------------------------------------------- main
pending=()
for id in "${ids[@]}"; do
  if ! present "$id"; then pending+=("$id"); fi
done
# All apt sources first, so that one apt-get update serves every server.
for id in ${pending[@]+"${pending[@]}"}; do source_for "$id"; done
for id in ${pending[@]+"${pending[@]}"}; do
  case ${how[$id]} in
    apt\ *) install_apt "$id" ;;
    src\ *) build "$id" ;;
  esac
done

registry_tmp=$(mktemp "$CACHE/.servers.tsv.XXXXXX")
for id in "${ALL_IDS[@]}"; do
  if [ -n "${line[$id]:-}" ]; then printf '%s\n' "${line[$id]}"; fi
done >"$registry_tmp"
chmod 644 "$registry_tmp"
mv -f "$registry_tmp" "$REGISTRY"
if [ "$print_lines" = 1 ]; then
  # This run's servers only, in the registry's order (scripts/matrix.sh reads these).
  for id in "${ALL_IDS[@]}"; do
    for want in "${ids[@]}"; do
      if [ "$id" = "$want" ]; then printf '%s\n' "${line[$id]}"; fi
    done
  done
else
  printf '%s\n' "$REGISTRY"
fi
