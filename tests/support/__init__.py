"""Plain helpers shared by the test files: the hand-made fixture traces and policies (`fixture`), the project's
and the shared data's paths (`paths`), releases run through the command line and the stages before
publication (`releases`), the scratch environment every test process runs in (`environment`), spies on the
package (`spies`), the project's prose as the tests read it (`documentation`), and the inputs that several
test files build: small suppression tables (`tables`), the golden suppression table (`golden_pattern`), the
counting paths' hard cases (`counting_inputs`), the time ladder fixture (`ladder`), and the risk estimate's
plain reference and generated key sets (`key_sets`), the DP release tests' fleet and policy (`dp`), and
whether Spark can run here (`spark`).

pytest fixtures stay in tests/conftest.py; nothing here changes the environment when it is imported. A test
file imports helpers from here, never from another test file (`tests/test_layout.py` checks it): a helper
two files need lives here. tests/ is on pytest's `pythonpath` (pyproject.toml), so a test imports
`from support.fixture import ...`."""
