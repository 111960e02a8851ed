"""Every colour the figures use reads in greyscale and under the common colour-vision deficiencies.

Simulated with Machado, Oliveira and Fernandes (2009) at full severity in linear RGB; lightness is CIE L*.
A sequential map must stay ordered by lightness alone (greyscale) and under each simulation; a diverging map's two
ends and a pair of category colours must stay apart under each simulation.
"""

from __future__ import annotations

import numpy as np
import plotly.colors
import pytest

from viz.head_stats import UNBOUNDED_COLORSCALE
from viz.internals import DIVERGING, MASK_COLOURS
from viz.interventions import CHANGED_COLOUR, IMPORTANCE_COLORSCALE, KEPT_COLOUR
from viz.pairs import DIFFERENCE_COLORSCALE
from viz.style import ATTENTION_COLORSCALE, head_colour
from viz.training import EXPECTED_COLOUR

SIMULATIONS = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
SEQUENTIAL = {"attention weights": ATTENTION_COLORSCALE, "head statistics": UNBOUNDED_COLORSCALE, "norms": "Blues",
              "positional encoding": "Viridis"}  # fmt: skip
DIVERGING_MAPS = {"signed values": DIVERGING, "pair difference": DIFFERENCE_COLORSCALE,
                  "head importance": IMPORTANCE_COLORSCALE}  # fmt: skip
PAIRS = {
    "changed against kept token": (CHANGED_COLOUR, KEPT_COLOUR),
    "hidden against allowed position": (MASK_COLOURS[0][1], MASK_COLOURS[-1][1]),
    "expected-alignment outline against the darkest weight": (EXPECTED_COLOUR, ATTENTION_COLORSCALE[-1][1]),
    "first against second head": (head_colour(0), head_colour(1)),
}
STEPS = 17  # colours sampled along each map
APART = 20.0  # the least CIE76 colour difference for two colours to read as different


def linear_rgb(colour: str) -> np.ndarray:
    """#rrggbb, rgb(...) or rgba(...) as linear RGB in [0, 1]."""
    if colour.startswith("#"):
        colour = plotly.colors.hex_to_rgb(colour)
    else:
        colour = [float(part) for part in colour[colour.index("(") + 1 : -1].split(",")[:3]]
    srgb = np.asarray(colour, dtype=float) / 255.0
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def lab(rgb: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (D65) of linear RGB."""
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(colour: str, simulation: str | None) -> np.ndarray:
    rgb = linear_rgb(colour)
    if simulation is not None:
        rgb = np.clip(np.asarray(SIMULATIONS[simulation]) @ rgb, 0.0, 1.0)
    return lab(rgb)


def sampled(scale) -> list[str]:
    scale = plotly.colors.get_colorscale(scale) if isinstance(scale, str) else scale
    return plotly.colors.sample_colorscale(scale, list(np.linspace(0.0, 1.0, STEPS)))


@pytest.mark.parametrize("simulation", [None, *SIMULATIONS])
@pytest.mark.parametrize("name", SEQUENTIAL)
def test_sequential_maps_are_ordered_by_lightness_alone(name, simulation):
    lightness = [seen(colour, simulation)[0] for colour in sampled(SEQUENTIAL[name])]
    steps = np.diff(lightness)
    assert np.all(steps < 0) or np.all(steps > 0), (name, simulation, np.round(lightness, 1))


@pytest.mark.parametrize("simulation", [None, *SIMULATIONS])
@pytest.mark.parametrize("name", DIVERGING_MAPS)
def test_diverging_maps_keep_their_ends_apart_and_their_middle_lightest(name, simulation):
    colours = [seen(colour, simulation) for colour in sampled(DIVERGING_MAPS[name])]
    assert np.linalg.norm(colours[0] - colours[-1]) > APART, (name, simulation)
    lightness = [colour[0] for colour in colours]
    assert max(lightness) == pytest.approx(lightness[STEPS // 2], abs=3.0)  # zero is the lightest: no sign hides


@pytest.mark.parametrize("simulation", [None, *SIMULATIONS])
@pytest.mark.parametrize("name", PAIRS)
def test_paired_colours_stay_apart(name, simulation):
    first, second = PAIRS[name]
    assert np.linalg.norm(seen(first, simulation) - seen(second, simulation)) > APART, (name, simulation)


def test_the_check_tells_a_rainbow_and_a_red_green_pair():
    """The simulation is what it claims: a rainbow is not ordered by lightness, and red against green of the same
    lightness is one colour to a deuteranope."""
    lightness = [seen(colour, None)[0] for colour in sampled("Jet")]
    assert not (np.all(np.diff(lightness) < 0) or np.all(np.diff(lightness) > 0))
    assert np.linalg.norm(seen("#d62728", "deuteranopia") - seen("#2ca02c", "deuteranopia")) < APART
    assert np.linalg.norm(seen("#d62728", None) - seen("#2ca02c", None)) > APART
