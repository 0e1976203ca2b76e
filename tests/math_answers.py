r"""Replies to math problems in the forms models write, shared by the math reward's tests and
``benchmarks/math_vs_trl.py``.

``AGREED_WITH_TRL``: forms on which the accuracy part and TRL's own ``trl.rewards.accuracy_reward``
should give the same score (boxed answers, anchored ``$…$``, LaTeX fractions, right and wrong).
``NEW_FORMS``: forms the accuracy part reads since issue 48 and scored 0.0 before it; TRL reads some
of them and not others (it needs LaTeX: ``#### 18`` or ``Final answer: 72`` is 0.0 to it).
"""

from __future__ import annotations

REASONING = "She buys 3 packs of 6 and gives 4 away.\n"

# (reply, reference, the right score)
AGREED_WITH_TRL = [
    (REASONING + r"\boxed{18}", "18", 1.0),
    (REASONING + r"The answer is $\boxed{18}$.", "18", 1.0),
    (REASONING + r"Therefore, the final answer is: $\boxed{72}$. I hope it is correct.", "72", 1.0),
    (REASONING + r"\[ \boxed{\frac{5}{4}} \]", "1.25", 1.0),
    (REASONING + r"\boxed{\frac{1}{3}}", r"\frac{1}{3}", 1.0),
    (REASONING + r"\boxed{\frac{1}{2}}", r"\frac{1}{3}", 0.0),
    (REASONING + r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (REASONING + r"\boxed{\dfrac{3}{4}}", "0.75", 1.0),
    (REASONING + r"\boxed{17}", "18", 0.0),
    (REASONING + r"$\boxed{1,600}$", "1,600", 1.0),
    (REASONING + r"\boxed{1600}", "1,600", 1.0),
    (REASONING + r"\boxed{1{,}600{,}000}", "1600000", 1.0),
    (REASONING + r"\boxed{-7}", "-7", 1.0),
    (REASONING + r"\boxed{-7}", "7", 0.0),
    (REASONING + "\\boxed{\u22125}", "-5", 1.0),
    (REASONING + r"\boxed{\$18}", "18", 1.0),
    (REASONING + r"\boxed{\$18.00}", "18", 1.0),
    (REASONING + r"\boxed{18 \text{ dollars}}", "18", 1.0),
    (REASONING + r"\boxed{\sqrt{8}}", r"$2\sqrt{2}$", 1.0),
    (REASONING + r"\boxed{x^2+1}", "$x^2+1$", 1.0),
    (REASONING + r"\boxed{x^2-1}", "$x^2+1$", 0.0),
    (REASONING + r"\boxed{\pi}", r"$\pi$", 1.0),
    (REASONING + r"The answer is $18$.", "18", 1.0),
    (REASONING + r"Final answer: $\frac{1}{2}$", "0.5", 1.0),
    (REASONING + r"The final answer is $19$.", "18", 0.0),
    (REASONING + r"The answer is $18.00$", "18", 1.0),
    (REASONING + "I don't know.", "18", 0.0),
    (REASONING + r"\boxed{}", "18", 0.0),
]

# name -> (reply, reference, the form that reads it): each reply is right; the accuracy part before
# issue 48 scored every one 0.0, and scores it 0.0 again without that answer form or number form
NEW_FORMS = {
    "boxed": (REASONING + r"\boxed{18}", "18", "boxed"),
    "the last boxed": (REASONING + r"First \boxed{5}, no: \boxed{18}", "18", "boxed"),
    "latex": (REASONING + "So she has $18$.", "18", "latex"),
    "latex display": (REASONING + r"\[ \frac{5}{4} \]", "1.25", "latex"),
    "final answer": (REASONING + "Final answer: 72", "72", "phrase"),
    "the answer is": (REASONING + "The answer is 72.", "72", "phrase"),
    "currency, escaped": (REASONING + r"#### \$18.00", "18", "currency"),
    "currency, negative": (REASONING + "#### -$5", "-5", "currency"),
    "unicode minus": (REASONING + "#### \u22125", "-5", "unicode_minus"),
    "scientific": (REASONING + "#### 1e6", "1000000", "scientific"),
    "scientific, negative exponent": (REASONING + "#### 2.5e-3", "0.0025", "scientific"),
    "commas, LaTeX braces": (REASONING + "#### 1{,}600", "1600", "commas"),
    "commas, LaTeX thin space": (REASONING + r"#### 1\,600", "1,600", "commas"),
}
