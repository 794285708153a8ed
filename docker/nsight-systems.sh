#!/usr/bin/env bash
# Nsight Systems (`nsys`) from Debian's non-free archive, unpacked into one prefix that works as NVIDIA's own does.
#   bash docker/nsight-systems.sh VERSION PREFIX [SUITE]
# VERSION is a Debian version of nsight-systems-target and nsight-systems (docker/matrix.toml names them per CUDA);
# SUITE the Debian release that has it (default: the one this VERSION comes from, bookworm/trixie/bullseye by its
# CUDA). Used by the cuda-debian image kinds (the Dockerfile runs it) and by .ci/test-tools.sh on the CI machine.
#
# Why unpack rather than `apt-get install`: nsight-systems-target depends on Debian's libcuda1, whose driver libraries
# would shadow the host driver's in a container; and Debian splits the CLI (target-linux-x64, under
# /usr/lib/x86_64-linux-gnu) from its report importer (host-linux-x64, in the 150 MB GUI package, under /usr/lib),
# so `nsys profile` cannot find the importer and leaves only a .qdstrm. Here both sit side by side in PREFIX:
#   PREFIX/target-linux-x64/   the CLI, CUPTI, the injection libraries, `nsys stats`' report scripts
#   PREFIX/host-linux-x64/     QdstrmImporter and the libraries it links (not the GUI: about 55 of 430 MB)
#   PREFIX/bin/nsys            -> ../target-linux-x64/nsys
# The importer's runtime libraries (libssh-4, libpfm4) come from the same archive; as root they are installed.
set -euo pipefail
version=${1:?usage: nsight-systems.sh VERSION PREFIX [SUITE]}
prefix=${2:?usage: nsight-systems.sh VERSION PREFIX [SUITE]}
case "$version" in
  *~11.2.*) default_suite=bullseye ;;
  *~11.8.*) default_suite=bookworm ;;
  *) default_suite=trixie ;;
esac
suite=${3:-$default_suite}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The archive the system already uses (a site mirror, a proxy in apt.conf), else Debian's own.
archive=$(grep -hoE '^(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]+' \
            /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -v security | head -n 1 | awk '{print $NF}' || true)
archive=${archive:-http://deb.debian.org/debian}
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/x"
echo "deb $archive $suite non-free main" > "$work/sources.list"
apt_opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists"
          -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
( cd "$work/debs" && apt-get "${apt_opts[@]}" download -qq "nsight-systems-target=$version" "nsight-systems=$version" )
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
target=$work/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64
host=$work/x/usr/lib/nsight-systems/host-linux-x64
[ -x "$target/nsys" ] && [ -x "$host/QdstrmImporter" ] || { echo "nsight-systems $version: unexpected layout" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
  # Debian's libssh-4 and libpfm4 (the importer's), from the system's own sources.
  missing=()
  for pkg in libssh-4 libpfm4; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
rm -rf "$prefix"
mkdir -p "$prefix/host-linux-x64" "$prefix/bin"
cp -a "$target" "$prefix/"
# The importer and the libraries it links from its own folder (its closure), plus what it loads at run time.
cp -a "$host/QdstrmImporter" "$prefix/host-linux-x64/"
libs=$(cd "$host" && LD_LIBRARY_PATH=$host ldd ./QdstrmImporter | awk -v h="$host" 'index($3, h) == 1 {print $1}')
for lib in $libs libexporter.so; do
  [ -e "$host/$lib" ] && cp -L "$host/$lib" "$prefix/host-linux-x64/"
done
# Debian points the importer's libssh at its own path; make it the system's libssh.so.4.
rm -f "$prefix/host-linux-x64/libssh.so" "$prefix/host-linux-x64/libssh.so.4"
ln -s /usr/lib/x86_64-linux-gnu/libssh.so.4 "$prefix/host-linux-x64/libssh.so"
ln -s /usr/lib/x86_64-linux-gnu/libssh.so.4 "$prefix/host-linux-x64/libssh.so.4"
ln -s ../target-linux-x64/nsys "$prefix/bin/nsys"
# `nsys stats` runs report scripts that import nsysstats from python/lib; Debian moved it to dist-packages.
for f in "$work"/x/usr/lib/python3/dist-packages/{nsysstats,gpustats}.py; do
  [ -e "$f" ] && [ ! -e "$prefix/target-linux-x64/python/lib/$(basename "$f")" ] && cp "$f" "$prefix/target-linux-x64/python/lib/"
done
"$prefix/bin/nsys" --version
"$prefix/host-linux-x64/QdstrmImporter" --version >/dev/null 2>&1 \
  || { echo "nsight-systems $version: the report importer does not start (libssh-4, libpfm4 installed?)" >&2; exit 1; }
