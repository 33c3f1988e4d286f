"""The pixel and label scores of reconstruction attacks (referee.score_reconstruction), as Dimitrov et al. 2022
count recovered images: Hungarian pairs on PSNR, a pair above 20 dB is an image recovered."""

from __future__ import annotations

import numpy as np

from leakbed.referee.score_reconstruction import RECOVERED_PSNR, frequency_guess, images_x_chance, label_accuracy, psnr_matched


def test_psnr_pairs_each_true_image_with_its_reconstruction_in_any_order():
    rng = np.random.default_rng(0)
    true = rng.random((6, 1, 8, 8))
    noisy = np.clip(true + rng.normal(0, 0.03, true.shape), 0, 1)[::-1]  # ~30 dB, reversed order
    psnr = psnr_matched(noisy, true)
    assert psnr.shape == (6,) and (psnr > RECOVERED_PSNR + 5).all()
    assert (psnr_matched(rng.random(true.shape), true) < 12).all()  # unrelated images: far below the threshold


def test_label_accuracy_is_the_multiset_overlap():
    assert label_accuracy(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2]), 3) == 0.75
    assert label_accuracy(np.array([2, 1, 0]), np.array([0, 1, 2]), 3) == 1.0
    guess = frequency_guess(np.array([6.0, 3.0, 1.0]), 10)
    assert list(np.bincount(guess, minlength=3)) == [6, 3, 1]


def test_images_x_chance_stays_finite_when_no_prior_image_passes():
    assert images_x_chance(19, 0) == 20.0 and images_x_chance(3, 3) == 1.0 and images_x_chance(0, 4) == 0.2
