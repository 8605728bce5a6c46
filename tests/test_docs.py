"""The README stays a README (short, every link live), and the manual's links resolve. `.ci/run` also builds
the manual with `mkdocs build --strict`; these checks cover the README and bench/RESULTS.md, which the site
does not contain, and run without mkdocs."""

from support.documentation import PROJECT_ROOT, README, README_MAX_LINES, anchor, broken_links, pages


def test_the_readme_is_read_in_five_minutes():
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_every_relative_link_of_the_readme_and_the_manual_resolves():
    results = PROJECT_ROOT / "bench" / "RESULTS.md"
    assert len(pages()) > 1  # the manual is there, not only the README
    broken = [problem for page in [*pages(), results] for problem in broken_links(page)]
    assert not broken, broken


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    """Negative control: a link to no file and one to no heading are reported; links in code are not links."""
    (tmp_path / "other.md").write_text("# Other page\n\n## The `risk.model` key\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#the-riskmodel-key) [self](#page) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [no heading](other.md#nowhere)\n`[code](missing.md)`\n```\n[block](missing.md)\n```\n"
    )
    assert broken_links(page) == ["page.md: missing.md (no such file)", "page.md: other.md#nowhere (no such heading)"]
    assert anchor("Differential privacy (`protection.method: dp`)") == "differential-privacy-protectionmethod-dp"
