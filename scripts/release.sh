#!/bin/bash
# Cut a release (make release VERSION=vX.Y.Z), in the checkout it runs in:
#   1. the chart's appVersion (and its version) become VERSION, and everything that names the
#      previous release follows: the manifests' image tags, the chart's values, the
#      kustomizations, the docs and the Dockerfiles' comments (CHANGELOG.md keeps its history);
#   2. CHANGELOG.md's Unreleased section becomes "## [VERSION] - DATE" under a new, empty
#      Unreleased section;
#   3. go test ./deployments ./docs checks everything names the release; then one commit
#      "Release VERSION" and the annotated tag VERSION, whose message is the release notes;
#   4. make images PLATFORMS=$RELEASE_PLATFORMS VERSION=VERSION builds the multi-arch images
#      (bin/images/oci/<image>: crane push ... REGISTRY/<image>:VERSION);
#   5. bin/release/VERSION.md: the release notes, the changelog's section and the images.
# It pushes nothing. Needs a clean worktree and a VERSION no tag has.
# Env: RELEASE_PLATFORMS (default linux/amd64,linux/arm64; "none": no images), RELEASE_DATE
# (default today, UTC).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-}
PLATFORMS=${RELEASE_PLATFORMS:-linux/amd64,linux/arm64}
DATE=${RELEASE_DATE:-$(date -u +%F)}
CHART=deployments/helm/devplumb/Chart.yaml
fail() { echo "release: $*" >&2; exit 1; }

[[ $VERSION =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	fail "VERSION '$VERSION' is not a release version vMAJOR.MINOR.PATCH[-PRERELEASE] (make release VERSION=v1.2.3)"
[ -z "$(git status --porcelain)" ] || fail "the worktree has changes: commit or stash them first"
! git rev-parse -q --verify "refs/tags/$VERSION" >/dev/null || fail "tag $VERSION exists already"
OLD=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART")
[ -n "$OLD" ] || fail "$CHART has no appVersion"
grep -q '^## \[Unreleased\]' CHANGELOG.md || fail "CHANGELOG.md has no '## [Unreleased]' section"

# notes: the Unreleased section's body, without its heading and link lines.
notes=$(awk '/^## \[Unreleased\]/{on=1; next} on && /^## \[/{exit} on && !/^\[[^]]*\]: /{print}' CHANGELOG.md |
	sed -e '/./,$!d' | sed -e ':a' -e '/^\n*$/{$d;N;ba' -e '}')
grep -q '^### ' <<<"$notes" || fail "CHANGELOG.md's Unreleased section lists no change (### Added, ### Fixed, ...)"

# 1. the release the manifests, the chart and the docs name.
if [ "$OLD" != "$VERSION" ]; then
	old_re=$(sed 's/[.]/\\./g' <<<"$OLD")
	git grep -lwF "$OLD" -- deployments docs README.md e2e/kind/README.md images/devplumb images/netdev-dp |
		while read -r f; do sed -i "s/\\b$old_re\\b/$VERSION/g" "$f"; done
fi
sed -i "s/^version: .*/version: ${VERSION#v}/; s/^appVersion: .*/appVersion: \"$VERSION\"/" "$CHART"

# 2. the changelog's section for the release.
awk -v v="$VERSION" -v d="$DATE" '
	/^## \[Unreleased\]/ { print; print ""; print "## [" v "] - " d; skip = 1; next }
	skip && /^No release has been tagged yet/ { drop = 1 }
	drop { if ($0 == "") { drop = 0 }; next }
	/^\[Unreleased\]: / { print "[Unreleased]: https://github.com/devplumb/devplumb/compare/" v "...main"; print "[" v "]: https://github.com/devplumb/devplumb/releases/tag/" v; next }
	{ print }' CHANGELOG.md >CHANGELOG.md.tmp
mv CHANGELOG.md.tmp CHANGELOG.md

# 3. consistent, committed, tagged.
go test -count=1 -run '^(TestManifestsNameTheReleaseTag|TestDocsPinTheBuiltVersions|TestKindBuildsTheManifestsTag)$' ./deployments ./docs >&2 ||
	fail "the release's manifests or docs do not name one release (go test ./deployments ./docs): nothing committed; git checkout . undoes it"
git add -A
git commit -q -m "Release $VERSION"
body=$(sed -e '/^No release has been tagged yet/,/^$/d' <<<"$notes")
git tag -a --cleanup=verbatim "$VERSION" -F - <<<"devplumb $VERSION ($DATE)

$body"

# 4. the images.
mkdir -p bin/release
images="(no images built: RELEASE_PLATFORMS=none)"
if [ "$PLATFORMS" != none ]; then
	make images PLATFORMS="$PLATFORMS" VERSION="$VERSION" >&2
	images=$(for i in devplumb netdev-dp; do
		printf -- '- `%s:%s` for %s: OCI layout `bin/images/oci/%s`, index %s\n' "$i" "$VERSION" "$PLATFORMS" "$i" \
			"$(sed -n 's/.*"digest": *"\(sha256:[0-9a-f]*\)".*/\1/p' "bin/images/oci/$i/index.json" | head -1)"
	done)
fi

# 5. the release notes.
cat >"bin/release/$VERSION.md" <<EOF
# devplumb $VERSION ($DATE)

$body

## Images

$images

Install: docs/install.md. Upgrading: docs/install.md, "Upgrade and roll back".
EOF
echo "release: $VERSION tagged (not pushed); notes in bin/release/$VERSION.md" >&2
