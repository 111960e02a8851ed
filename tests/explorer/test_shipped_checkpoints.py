"""The shipped translation checkpoints on the page (AppTest): every view opens on each of them.

The checkpoints themselves (their cards, their BLEU floors) are tested in tests/model/test_shipped_checkpoints.py;
shipped_model is a fixture of tests/conftest.py.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from explorer import views
from tests.app_helpers import assert_ok, chart_titles
from tests.helpers import APP


def test_every_view_draws_the_shipped_model(shipped_model):
    """Each view opens on the checkpoint's own example without an error, and the attention views draw charts
    (the shipped translation models are pre-norm with a final LayerNorm; tests/explorer/test_views.py opens every
    view on a post-norm model)."""
    name, _, _ = shipped_model
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params["checkpoint"] = name
    app.run()
    assert app.selectbox(key="checkpoint").value == name
    for view in views.choices(presenting=False):
        app.segmented_control(key="view").set_value(view).run()
        assert_ok(app)
        assert not app.error, (view, [error.value for error in app.error])
        if view in ("cross", "steps", "encoder_self", "decoder_self"):
            assert chart_titles(app), view
