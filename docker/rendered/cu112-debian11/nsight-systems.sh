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
#   PREFIX/bin/nsys            runs ../target-linux-x64/nsys with PREFIX/lib (libelf) on the library path
# The importer's runtime libraries (libssh-4, libpfm4 and libssh's Kerberos) are unpacked beside it, from this system's release.
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
touch "$work/status"  # what this system has installed does not choose the versions downloaded
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/x"
echo "deb $archive $suite non-free main" > "$work/sources.list"
apt_opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists"
          -o Dir::Cache="$work/cache" -o Dir::State::status="$work/status" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
# The release this system runs (its libssh and libpfm match its C library), else SUITE's.
lib_suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
lib_suite=${lib_suite:-$suite}
mkdir -p "$work/liblists/partial" "$work/libdebs" "$work/libs"
echo "deb $archive $lib_suite main" > "$work/lib-sources.list"
lib_opts=(-o Dir::Etc::sourcelist="$work/lib-sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/liblists"
          -o Dir::Cache="$work/cache" -o Dir::State::status="$work/status" -o APT::Sandbox::User=root)
apt-get "${lib_opts[@]}" update -qq
# nsys itself links libelf (named libelf1t64 from trixie on); the importer libssh (with Kerberos) and libpfm.
libelf=libelf1t64
apt-cache "${lib_opts[@]}" show libelf1t64 >/dev/null 2>&1 || libelf=libelf1
LIB_PACKAGES="$libelf libssh-4 libpfm4 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2"
( cd "$work/debs" && apt-get "${apt_opts[@]}" download -qq "nsight-systems-target=$version" "nsight-systems=$version" )
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
target=$work/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64
host=$work/x/usr/lib/nsight-systems/host-linux-x64
[ -x "$target/nsys" ] && [ -x "$host/QdstrmImporter" ] || { echo "nsight-systems $version: unexpected layout" >&2; exit 1; }
rm -rf "$prefix"
mkdir -p "$prefix/host-linux-x64" "$prefix/bin"
cp -a "$target" "$prefix/"
# The importer and the libraries it links from its own folder (its closure), plus what it loads at run time.
cp -a "$host/QdstrmImporter" "$prefix/host-linux-x64/"
libs=$(cd "$host" && LD_LIBRARY_PATH=$host ldd ./QdstrmImporter | awk -v h="$host" 'index($3, h) == 1 {print $1}')
for lib in $libs libexporter.so; do
  [ -e "$host/$lib" ] && cp -L "$host/$lib" "$prefix/host-linux-x64/"
done
# Those libraries, from this system's own Debian release, unpacked beside the CLI and the importer:
# the prefix installs nothing system-wide and works where it is mounted read-only into a container of that release.
rm -f "$prefix/host-linux-x64/libssh.so" "$prefix/host-linux-x64/libssh.so.4"
( cd "$work/libdebs" && apt-get "${lib_opts[@]}" download -qq $LIB_PACKAGES )
for deb in "$work"/libdebs/*.deb; do dpkg-deb -x "$deb" "$work/libs"; done
find "$work/libs" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$prefix/host-linux-x64/" \;
mkdir -p "$prefix/lib"
find "$work/libs" -name 'libelf*.so*' \( -type f -o -type l \) -exec cp -P {} "$prefix/lib/" \;
ln -s libssh.so.4 "$prefix/host-linux-x64/libssh.so"
# nsys has no RUNPATH: PREFIX/bin/nsys finds libelf in PREFIX/lib, then runs the CLI (which finds its importer).
cat > "$prefix/bin/nsys" <<'EOF'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/../target-linux-x64/nsys" "$@"
EOF
chmod 755 "$prefix/bin/nsys"
# `nsys stats` runs report scripts that import nsysstats from python/lib; Debian moved it to dist-packages.
for f in "$work"/x/usr/lib/python3/dist-packages/{nsysstats,gpustats}.py; do
  [ -e "$f" ] && [ ! -e "$prefix/target-linux-x64/python/lib/$(basename "$f")" ] && cp "$f" "$prefix/target-linux-x64/python/lib/"
done
"$prefix/bin/nsys" --version
"$prefix/host-linux-x64/QdstrmImporter" --version >/dev/null 2>&1 \
  || { echo "nsight-systems $version: the report importer does not start" >&2; exit 1; }
