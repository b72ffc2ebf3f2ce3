"""The LiRA query statistic zeta for every document of one model at once, compiled with numba.

zeta(Phi, d) = max over theta in the simplex of sum_{w in d} c_w log(sum_z theta_z Phi_{z,w})
(FDPTM paper, section 3.3, eq. 3). The objective is concave in theta, so the EM fixed point
theta_z <- theta_z * sum_w c_w Phi_{z,w} / (sum_z' theta_z' Phi_{z',w}) / sum_w c_w, which
increases it monotonically (the E-step of a mixture with fixed components), converges to the
global maximum. Documents are independent; the kernel runs them in one pass over a CSR
layout (``doc_ptr``, ``word_ids``, ``counts``) instead of one SLSQP call per document.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def zeta_all(doc_ptr, word_ids, counts, phi_t, max_iterations, tolerance, out_theta, out_zeta):
    """zeta and the maximising theta of every document; ``phi_t`` is words x topics.

    Stops when the Frank-Wolfe duality gap max_z g_z - sum_z theta_z g_z (g the gradient)
    is below ``tolerance``: by concavity it bounds how far the objective is from zeta, so
    the result is within ``tolerance`` of the optimum (or ``max_iterations`` is reached).
    A document without tokens gets zeta = 0 (empty sum).
    """
    n_topics = phi_t.shape[1]
    theta = np.empty(n_topics)
    grad = np.empty(n_topics)
    for d in range(doc_ptr.shape[0] - 1):
        start, end = doc_ptr[d], doc_ptr[d + 1]
        total = 0.0
        for i in range(start, end):
            total += counts[i]
        for z in range(n_topics):
            theta[z] = 1.0 / n_topics
        if total > 0:
            for _ in range(max_iterations):
                for z in range(n_topics):
                    grad[z] = 0.0
                for i in range(start, end):
                    w = word_ids[i]
                    mix = 0.0
                    for z in range(n_topics):
                        mix += theta[z] * phi_t[w, z]
                    if mix > 0.0:
                        scale = counts[i] / mix
                        for z in range(n_topics):
                            grad[z] += phi_t[w, z] * scale
                top = 0.0
                for z in range(n_topics):
                    top = max(top, grad[z])
                if top - total < tolerance:
                    break
                for z in range(n_topics):
                    theta[z] = theta[z] * grad[z] / total
        value = 0.0
        for i in range(start, end):
            w = word_ids[i]
            mix = 0.0
            for z in range(n_topics):
                mix += theta[z] * phi_t[w, z]
            value += counts[i] * np.log(mix)
        out_zeta[d] = value
        for z in range(n_topics):
            out_theta[d, z] = theta[z]
