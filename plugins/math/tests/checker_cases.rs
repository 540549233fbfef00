//! The answer checker on answers written the way models write them, built from real MATH-500 and
//! GSM8K ground truths, with near misses that must be judged wrong.

use std::path::PathBuf;

use drmas_math::answer::{is_equivalent, normalize, score, MAX_ANSWER_LEN};

/// (model response, ground truth, expected score) — ground truths are MATH-500 / GSM8K answers.
const CASES: &[(&str, &str, bool)] = &[
    // MATH-500 tuples, intervals and coordinates.
    (
        "\\boxed{(3, \\frac{\\pi}{2})}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        true,
    ),
    (
        "\\boxed{\\left(3,\\dfrac{\\pi}{2}\\right)}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        true,
    ),
    (
        "\\boxed{(3, \\pi/2)}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        true,
    ),
    (
        "\\boxed{(3, 1.5707963)}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        true,
    ),
    (
        "\\boxed{(3, \\pi)}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        false,
    ),
    (
        "\\boxed{[3, \\frac{\\pi}{2}]}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        false,
    ),
    ("\\boxed{(3)}", "\\left( 3, \\frac{\\pi}{2} \\right)", false),
    ("\\boxed{(3,4]}", "(3,4]", true),
    ("\\boxed{(3, 4)}", "(3,4]", false),
    ("\\boxed{[3,4]}", "(3,4]", false),
    ("\\boxed{(-\\infty, 0]}", "(-\\infty, 0]", true),
    ("\\boxed{(-\\infty,0)}", "(-\\infty, 0]", false),
    ("\\boxed{(2, \\infty)}", "(2,\\infty)", true),
    ("\\boxed{[2, \\infty)}", "(2,\\infty)", false),
    (
        "\\boxed{(-\\infty, 2) \\cup (3, \\infty)}",
        "(-\\infty, 2) \\cup (3, \\infty)",
        true,
    ),
    (
        "\\boxed{(-\\infty, 2] \\cup (3, \\infty)}",
        "(-\\infty, 2) \\cup (3, \\infty)",
        false,
    ),
    ("\\boxed{(0,9)\\cup(9,36)}", "(0,9) \\cup (9,36)", true),
    ("\\boxed{(0,36)}", "(0,9) \\cup (9,36)", false),
    (
        "\\boxed{\\left(\\frac35, \\frac83\\right]}",
        "\\left(\\frac{3}{5},\\frac{8}{3}\\right]",
        true,
    ),
    (
        "\\boxed{(0.6, 8/3]}",
        "\\left(\\frac{3}{5},\\frac{8}{3}\\right]",
        true,
    ),
    (
        "\\boxed{(0.6, 8/3)}",
        "\\left(\\frac{3}{5},\\frac{8}{3}\\right]",
        false,
    ),
    (
        "\\boxed{(-\\sqrt3, \\sqrt3)}",
        "(-\\sqrt{3}, \\sqrt{3})",
        true,
    ),
    ("\\boxed{[-2,7]}", "x \\in [-2,7]", true),
    ("\\boxed{x \\in [-2, 7]}", "x \\in [-2,7]", true),
    ("\\boxed{(-2,7)}", "x \\in [-2,7]", false),
    ("\\boxed{(6,31,-1)}", "(6,31,-1)", true),
    ("\\boxed{(6, 31, 1)}", "(6,31,-1)", false),
    ("\\boxed{(6, 31)}", "(6,31,-1)", false),
    ("\\boxed{(1,-16,-4,43)}", "(1,-16,-4,43)", true),
    ("\\boxed{(1,-16,-4)}", "(1,-16,-4,43)", false),
    ("\\boxed{(15,-29)}", "(15,-29)", true),
    ("\\boxed{(-29,15)}", "(15,-29)", false),
    (
        "\\boxed{\\left( \\frac{3}{2}, -13 \\right)}",
        "\\left( \\frac{3}{2}, -13 \\right)",
        true,
    ),
    (
        "\\boxed{(1.5, -13)}",
        "\\left( \\frac{3}{2}, -13 \\right)",
        true,
    ),
    (
        "\\boxed{(1.5, 13)}",
        "\\left( \\frac{3}{2}, -13 \\right)",
        false,
    ),
    ("\\boxed{(8,-2)}", "(8,-2)", true),
    ("\\boxed{(-2,1)}", "(-2,1)", true),
    ("\\boxed{(1,-2)}", "(-2,1)", false),
    // Lists of solutions: any order.
    ("\\boxed{-2, 1}", "1,-2", true),
    ("\\boxed{1, -2}", "1,-2", true),
    ("\\boxed{1}", "1,-2", false),
    ("\\boxed{1, 2}", "1,-2", false),
    ("\\boxed{7, 5, 3}", "3, 5, 7", true),
    ("\\boxed{3, 5}", "3, 5, 7", false),
    ("\\boxed{1,-2}", "-2,1", true),
    (
        "\\boxed{\\{-2, 1\\pm\\sqrt{5}\\}}",
        "\\{1\\pm\\sqrt{5},-2\\}",
        true,
    ),
    // Fractions, roots and π.
    ("\\boxed{\\frac{14}{3}}", "\\frac{14}{3}", true),
    ("\\boxed{14/3}", "\\frac{14}{3}", true),
    ("\\boxed{\\dfrac{28}{6}}", "\\frac{14}{3}", true),
    ("\\boxed{4\\frac{2}{3}}", "\\frac{14}{3}", true),
    ("\\boxed{4.67}", "\\frac{14}{3}", false),
    ("\\boxed{\\frac{3}{14}}", "\\frac{14}{3}", false),
    ("\\boxed{\\frac{4}{3}}", "\\frac43", true),
    ("\\boxed{1.3333333333}", "\\frac43", true),
    ("\\boxed{\\frac{5}{9}}", "\\frac 59", true),
    ("\\boxed{\\frac{9}{19}}", "\\frac9{19}", true),
    ("\\boxed{\\frac{6}{5}}", "\\frac65", true),
    ("\\boxed{1.2}", "\\frac65", true),
    ("\\boxed{1.25}", "\\frac65", false),
    ("\\boxed{\\frac{17}{50}}", "\\dfrac{17}{50}", true),
    ("\\boxed{0.34}", "\\dfrac{17}{50}", true),
    ("\\boxed{0.33}", "\\dfrac{33}{100}", true),
    ("\\boxed{\\frac{1}{3}}", "\\dfrac{33}{100}", false),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", true),
    ("\\boxed{0.5}", "\\frac{1}{2}", true),
    ("\\boxed{1/2}", "\\frac{1}{2}", true),
    ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", true),
    ("\\boxed{-\\frac{1}{2}}", "\\frac{1}{2}", false),
    ("\\boxed{3\\sqrt{13}}", "3\\sqrt{13}", true),
    ("\\boxed{\\sqrt{117}}", "3\\sqrt{13}", true),
    ("\\boxed{3\\sqrt{12}}", "3\\sqrt{13}", false),
    ("\\boxed{11\\sqrt{2}}", "11\\sqrt2", true),
    ("\\boxed{\\sqrt{242}}", "11\\sqrt2", true),
    ("\\boxed{70\\sqrt2}", "70 \\sqrt{2}", true),
    ("\\boxed{\\sqrt{51}}", "\\sqrt{51}", true),
    ("\\boxed{\\sqrt{50}}", "\\sqrt{51}", false),
    (
        "\\boxed{\\frac{3\\sqrt3}{4}}",
        "\\frac{3\\sqrt{3}}{4}",
        true,
    ),
    (
        "\\boxed{\\frac{3}{4}\\sqrt{3}}",
        "\\frac{3\\sqrt{3}}{4}",
        true,
    ),
    (
        "\\boxed{\\frac{1}{\\sqrt{3}}}",
        "\\frac{\\sqrt{3}}{3}",
        true,
    ),
    (
        "\\boxed{\\frac{\\sqrt{3}}{2}}",
        "\\frac{\\sqrt{3}}{3}",
        false,
    ),
    ("\\boxed{2\\sqrt{113}}", "2\\sqrt{113}", true),
    ("\\boxed{\\sqrt{452}}", "2\\sqrt{113}", true),
    ("\\boxed{-\\sqrt{3}}", "-\\sqrt{3}", true),
    ("\\boxed{\\sqrt{3}}", "-\\sqrt{3}", false),
    ("\\boxed{\\pi}", "\\pi", true),
    ("\\boxed{3.14}", "\\pi", false),
    ("\\boxed{-\\frac{\\pi}{6}}", "-\\frac{\\pi}{6}", true),
    ("\\boxed{-\\pi/6}", "-\\frac{\\pi}{6}", true),
    ("\\boxed{\\frac{\\pi}{6}}", "-\\frac{\\pi}{6}", false),
    ("\\boxed{288\\pi}", "288 \\pi", true),
    ("\\boxed{289\\pi}", "288 \\pi", false),
    ("\\boxed{2\\pi + 18}", "18+2\\pi", true),
    ("\\boxed{7\\pi}", "7\\pi", true),
    ("\\boxed{\\frac{20000}{\\pi}}", "\\frac{20000}{\\pi}", true),
    (
        "\\boxed{\\left[\\frac{\\pi^2}{8}, \\frac{5\\pi^2}{4}\\right]}",
        "\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]",
        true,
    ),
    (
        "\\boxed{\\left(\\frac{\\pi^2}{8}, \\frac{5\\pi^2}{4}\\right]}",
        "\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]",
        false,
    ),
    ("\\boxed{1+2\\sqrt3}", "1+2\\sqrt{3}", true),
    ("\\boxed{2\\sqrt{3}+1}", "1+2\\sqrt{3}", true),
    ("\\boxed{2\\sqrt{3}-1}", "1+2\\sqrt{3}", false),
    ("\\boxed{11+11\\sqrt5}", "11 \\sqrt{5} + 11", true),
    (
        "\\boxed{\\frac{\\sqrt{21}}{5}}",
        "\\frac{\\sqrt{21}}{5}",
        true,
    ),
    ("\\boxed{137.5}", "137 \\frac{1}{2}", true),
    ("\\boxed{137\\frac12}", "137 \\frac{1}{2}", true),
    ("\\boxed{138}", "137 \\frac{1}{2}", false),
    ("\\boxed{\\frac{9}{5}}", "1\\frac{4}{5}", true),
    (
        "\\boxed{\\frac{270}{7}}",
        "\\frac{270}7\\text{ degrees}",
        true,
    ),
    (
        "\\boxed{\\frac{270}{7}^\\circ}",
        "\\frac{270}7\\text{ degrees}",
        true,
    ),
    ("\\boxed{-\\frac{35}{9}}", "-\\frac{35}{9}", true),
    ("\\boxed{\\frac{-35}{9}}", "-\\frac{35}{9}", true),
    ("\\boxed{\\frac{35}{9}}", "-\\frac{35}{9}", false),
    ("\\boxed{\\frac{448}{15625}}", "\\frac{448}{15625}", true),
    ("\\boxed{0.028672}", "\\frac{448}{15625}", true),
    ("\\boxed{0.0287}", "\\frac{448}{15625}", false),
    ("\\boxed{6.72 \\times 10^{-5}}", ".0000672", true),
    ("\\boxed{0.0000672}", ".0000672", true),
    ("\\boxed{0.0000673}", ".0000672", false),
    ("\\boxed{0.35625}", ".35625", true),
    ("\\boxed{\\frac{57}{160}}", ".35625", true),
    // Decimals, money, units and degrees.
    ("\\boxed{1.25}", "1.25", true),
    ("\\boxed{\\frac54}", "1.25", true),
    ("\\boxed{1.250}", "1.25", true),
    ("\\boxed{1.2}", "1.25", false),
    ("\\boxed{0.15}", "0.15", true),
    ("\\boxed{\\frac{3}{20}}", "0.15", true),
    ("\\boxed{15\\%}", "0.15", false),
    ("\\boxed{3.21}", "3.21", true),
    ("\\boxed{3.12}", "3.21", false),
    ("\\boxed{326.5}", "326.5", true),
    ("\\boxed{4.5}", "4.5", true),
    ("\\boxed{\\frac{9}{2}}", "4.5", true),
    ("\\boxed{5.4}", "5.4 \\text{ cents}", true),
    ("\\boxed{5.4\\text{ cents}}", "5.4 \\text{ cents}", true),
    ("\\boxed{5.40 \\text{ cents}}", "5.4 \\text{ cents}", true),
    ("\\boxed{54}", "5.4 \\text{ cents}", false),
    ("\\boxed{\\$18.90}", "\\$18.90", true),
    ("\\boxed{18.9}", "\\$18.90", true),
    ("\\boxed{18.09}", "\\$18.90", false),
    ("\\boxed{90^\\circ}", "90^\\circ", true),
    ("\\boxed{90}", "90^\\circ", true),
    ("\\boxed{90^{\\circ}}", "90^\\circ", true),
    ("\\boxed{89^\\circ}", "90^\\circ", false),
    ("\\boxed{145^\\circ}", "145^\\circ", true),
    ("\\boxed{145 \\text{ degrees}}", "145^\\circ", true),
    ("\\boxed{864}", "864 \\mbox{ inches}^2", true),
    (
        "\\boxed{864 \\text{ square inches}}",
        "864 \\mbox{ inches}^2",
        true,
    ),
    ("\\boxed{15 \\text{ cm}^2}", "15\\mbox{ cm}^2", true),
    ("\\boxed{16 \\text{ cm}^2}", "15\\mbox{ cm}^2", false),
    // Integers: strict.
    ("\\boxed{10080}", "10,\\!080", true),
    ("\\boxed{10,080}", "10,\\!080", true),
    ("\\boxed{10081}", "10,\\!080", false),
    (
        "\\boxed{11,111,111,100}",
        "11,\\! 111,\\! 111,\\! 100",
        true,
    ),
    ("\\boxed{11111111100}", "11,\\! 111,\\! 111,\\! 100", true),
    ("\\boxed{11111111101}", "11,\\! 111,\\! 111,\\! 100", false),
    ("\\boxed{\\$32,348}", "\\$32,\\!348", true),
    ("\\boxed{32348}", "\\$32,\\!348", true),
    ("\\boxed{32,349}", "\\$32,\\!348", false),
    ("\\boxed{58500}", "58,500", true),
    ("\\boxed{58,500}", "58,500", true),
    ("\\boxed{58.5}", "58,500", false),
    ("\\boxed{\\$36}", "\\$36", true),
    ("\\boxed{36 dollars}", "\\$36", true),
    ("\\boxed{36.00}", "\\$36", true),
    ("\\boxed{3.0}", "3", true),
    ("\\boxed{3.0001}", "3", false),
    ("\\boxed{2.9999}", "3", false),
    ("\\boxed{\\frac{6}{2}}", "3", true),
    ("\\boxed{\\sqrt{9}}", "3", true),
    ("\\boxed{x = 3}", "3", true),
    ("\\boxed{-3}", "3", false),
    ("\\boxed{4}", "3", false),
    ("\\boxed{28800}", "28800", true),
    ("\\boxed{28800.01}", "28800", false),
    ("\\boxed{2.88 \\times 10^4}", "28800", true),
    ("\\boxed{-50}", "-50", true),
    ("\\boxed{50}", "-50", false),
    ("\\boxed{-256}", "-256", true),
    ("\\boxed{-255}", "-256", false),
    ("\\boxed{0}", "0", true),
    ("\\boxed{0.0}", "0", true),
    ("\\boxed{-0}", "0", true),
    ("\\boxed{0.001}", "0", false),
    ("\\boxed{5}", "x=5", true),
    ("\\boxed{x=5}", "x=5", true),
    ("\\boxed{6}", "x=5", false),
    ("\\boxed{2220}", "2220", true),
    ("\\boxed{2,220}", "2220", true),
    ("\\boxed{222}", "2220", false),
    ("\\boxed{13535}", "13535", true),
    ("\\boxed{13,535}", "13535", true),
    ("\\boxed{1,3535}", "13535", false),
    // Expressions with variables, complex numbers, equations.
    ("\\boxed{p-q}", "p - q", true),
    ("\\boxed{-q+p}", "p - q", true),
    ("\\boxed{q-p}", "p - q", false),
    ("\\boxed{6-5i}", "6 - 5i", true),
    ("\\boxed{-5i+6}", "6 - 5i", true),
    ("\\boxed{6+5i}", "6 - 5i", false),
    ("\\boxed{1 + 274i}", "1+274i", true),
    ("\\boxed{1 - 274i}", "1+274i", false),
    ("\\boxed{2k + 2}", "2k+2", true),
    ("\\boxed{2(k+1)}", "2k+2", true),
    ("\\boxed{2k+1}", "2k+2", false),
    ("\\boxed{(a+5)(b+2)}", "(a+5)(b+2)", true),
    ("\\boxed{(b+2)(a+5)}", "(a+5)(b+2)", true),
    ("\\boxed{ab + 2a + 5b + 10}", "(a+5)(b+2)", true),
    ("\\boxed{(a+2)(b+5)}", "(a+5)(b+2)", false),
    (
        "\\boxed{x^5-x^4+x^3-x^2+x-1}",
        "x^5 - x^4 + x^3 - x^2 + x - 1",
        true,
    ),
    (
        "\\boxed{x^5+x^4+x^3-x^2+x-1}",
        "x^5 - x^4 + x^3 - x^2 + x - 1",
        false,
    ),
    ("\\boxed{3x + x^3 - 6}", "x^3+3x-6", true),
    ("\\boxed{x^3+3x+6}", "x^3+3x-6", false),
    ("\\boxed{6r^2 - 4r - 24}", "6r^2-4r-24", true),
    ("\\boxed{2(3r^2-2r-12)}", "6r^2-4r-24", true),
    ("\\boxed{-13x+3}", "-13x+3", true),
    ("\\boxed{3-13x}", "-13x+3", true),
    ("\\boxed{13x+3}", "-13x+3", false),
    ("\\boxed{15x-80}", "15x - 80", true),
    ("\\boxed{5r^5}", "5r^5", true),
    ("\\boxed{5r^4}", "5r^5", false),
    ("\\boxed{3R^2}", "3R^2", true),
    ("\\boxed{8n^2+4n+1}", "8n^2 + 4n + 1", true),
    ("\\boxed{\\frac{11+9a}{20}}", "\\frac{11+9a}{20}", true),
    (
        "\\boxed{\\frac{11}{20}+\\frac{9a}{20}}",
        "\\frac{11+9a}{20}",
        true,
    ),
    ("\\boxed{y = 2x + 3}", "y = 2x + 3", true),
    ("\\boxed{2x+3}", "y = 2x + 3", true),
    ("\\boxed{y = 2x - 3}", "y = 2x + 3", false),
    ("\\boxed{y=-2x}", "y = -2x", true),
    ("\\boxed{5x-7y+11z+4=0}", "5x - 7y + 11z + 4 = 0", true),
    ("\\boxed{5x-7y+11z-4=0}", "5x - 7y + 11z + 4 = 0", false),
    ("\\boxed{\\cot x}", "\\cot x", true),
    ("\\boxed{\\frac{\\cos x}{\\sin x}}", "\\cot x", true),
    ("\\boxed{\\tan x}", "\\cot x", false),
    ("\\boxed{1\\pm\\sqrt{19}}", "1 \\pm \\sqrt{19}", true),
    ("\\boxed{3 \\pm 2\\sqrt{2}}", "3 \\pm 2 \\sqrt{2}", true),
    // Matrices and vectors.
    (
        "\\boxed{\\begin{pmatrix} -\\frac13 \\\\ \\frac23 \\\\ \\frac53 \\end{pmatrix}}",
        "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
        true,
    ),
    (
        "\\boxed{\\begin{pmatrix} 1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}}",
        "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
        false,
    ),
    (
        "\\boxed{\\begin{pmatrix}-2\\\\-14\\\\-7\\end{pmatrix}}",
        "\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}",
        true,
    ),
    (
        "\\boxed{\\begin{pmatrix}-2\\\\-14\\end{pmatrix}}",
        "\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}",
        false,
    ),
    (
        "\\boxed{\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}}",
        "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}",
        true,
    ),
    (
        "\\boxed{\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}}",
        "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}",
        false,
    ),
    (
        "\\boxed{\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}}",
        "\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}",
        true,
    ),
    // Text answers, bases and choices.
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", true),
    ("\\boxed{Evelyn}", "\\text{Evelyn}", true),
    ("\\boxed{\\text{Emily}}", "\\text{Evelyn}", false),
    ("\\boxed{\\text{east}}", "\\text{east}", true),
    ("\\boxed{\\text{west}}", "\\text{east}", false),
    ("\\boxed{\\text{even}}", "\\text{even}", true),
    ("\\boxed{\\text{odd}}", "\\text{even}", false),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}", true),
    ("\\boxed{(C)}", "\\text{(C)}", true),
    ("\\boxed{(B)}", "\\text{(C)}", false),
    ("\\boxed{\\text{ellipse}}", "\\text{ellipse}", true),
    ("\\boxed{\\text{parabola}}", "\\text{ellipse}", false),
    ("\\boxed{52_8}", "52_8", true),
    ("\\boxed{42}", "52_8", false),
    ("\\boxed{4210_5}", "4210_{5}", false),
    ("\\boxed{4210_{5}}", "4210_{5}", true),
    // Extraction: thinking, "the answer is", GSM8K's ####, nothing.
    (
        "<think>maybe \\boxed{17}</think>The answer is \\boxed{18}.",
        "18",
        true,
    ),
    (
        "<think>it is \\boxed{18}</think>So the answer is 17.",
        "18",
        false,
    ),
    ("Janet makes 9 * 2 = 18 dollars.\n#### 18", "18", true),
    ("The answer is $18.", "18", true),
    ("The final answer is 18 dollars.", "18", true),
    (
        "The final answer is: $\\frac{3}{56}$.",
        "\\frac{3}{56}",
        true,
    ),
    ("the answer is 1.25.", "1.25", true),
    ("the answer is 1.", "1.25", false),
    ("She makes 18 dollars a day.", "18", false),
    ("\\boxed{18} and also \\boxed{19}", "18", false),
    ("\\boxed 5", "5", true),
    ("$\\boxed 5$.", "5", true),
    ("\\fbox{5}", "5", true),
    ("", "5", false),
];

/// (model response, ground truth, expected score) for each rule beyond presentation, with the
/// near misses each rule must still reject.
const RULES: &[(&str, &str, bool)] = &[
    // `{,}` inside a number is a thousands separator.
    ("\\boxed{1{,}000}", "1000", true),
    ("\\boxed{1000}", "1{,}000", true),
    ("\\boxed{10{,}080}", "10,\\!080", true),
    ("\\boxed{\\$1{,}234{,}567}", "1234567", true),
    ("\\boxed{(1{,}000, 2)}", "(1000,2)", true),
    ("\\boxed{1{,}001}", "1{,}000", false),
    ("\\boxed{1}", "1{,}000", false),
    // Scientific e-notation is a power of ten.
    ("\\boxed{4.5e33}", "4.5\\times10^{33}", true),
    ("\\boxed{4.5 \\times 10^{33}}", "4.5e33", true),
    ("\\boxed{4.5 \\cdot 10^{33}}", "4.5E+33", true),
    ("\\boxed{4.6e33}", "4.5e33", false),
    ("\\boxed{4.5e32}", "4.5e33", false),
    ("\\boxed{1e6}", "1000000", true),
    ("\\boxed{1e6}", "1000001", false),
    ("\\boxed{6.72E-5}", ".0000672", true),
    ("\\boxed{2e+1}", "2e + 1", false),
    // A unit in parentheses after a number is not part of the answer.
    ("\\boxed{18}", "18 (apples)", true),
    ("#### 18", "18 (apples)", true),
    ("\\boxed{18 (apples)}", "18", true),
    ("\\boxed{17}", "18 (apples)", false),
    ("\\boxed{18}", "1 (apples)", false),
    // Exact arithmetic beyond float precision.
    ("\\boxed{2^{100}}", "2^{100}+1", false),
    ("\\boxed{2^{100}+1}", "2^{100}+1", true),
    (
        "\\boxed{2^{100}+1}",
        "1267650600228229401496703205377",
        true,
    ),
    ("\\boxed{2^{100}}", "1267650600228229401496703205377", false),
    ("\\boxed{4^{50}}", "2^{100}", true),
    ("\\boxed{\\frac{2^{100}+1}{3}}", "\\frac{2^{100}}{3}", false),
    ("\\boxed{10^{20}+1}", "100000000000000000001", true),
    ("\\boxed{10^{20}}", "100000000000000000001", false),
    ("\\boxed{0.1+0.2}", "0.3", true),
    ("\\boxed{x^{100}+1}", "x^{100}", false),
    ("\\boxed{(x+1)^{2}}", "x^2+2x+1", true),
    // A space after a comma makes a list, not a thousands separator.
    ("\\boxed{8, 221}", "8221", false),
    ("\\boxed{8,221}", "8221", true),
    ("\\boxed{221, 8}", "8, 221", true),
    ("\\boxed{8221}", "8, 221", false),
    ("\\boxed{8,221}", "8, 221", false),
    ("\\boxed{10,\\! 080}", "10080", true),
    // Distinct symbols are independent variables.
    ("\\boxed{2^{N}}", "2^{k}", false),
    ("\\boxed{2^{k}}", "2^{k}", true),
    ("\\boxed{N}", "n", false),
    ("\\boxed{a+D}", "2a", false),
    ("\\boxed{y+x}", "x+y", true),
    // A one-letter unit word is kept where the ground truth uses it as a variable.
    ("\\boxed{\\frac{37}{4} m}", "\\frac{37m}{4}", true),
    ("\\boxed{\\frac{37}{4}m}", "\\frac{37}{4} m", true),
    ("\\boxed{\\frac{37}{4}}", "\\frac{37}{4} m", false),
    ("\\boxed{\\frac{37}{4}}", "\\frac{37m}{4}", false),
    ("\\boxed{3m+2}", "2+3m", true),
    ("\\boxed{12 m}", "12", true),
    ("\\boxed{12 m}", "12 \\text{ m}", true),
    ("\\boxed{12 meters}", "12", true),
    // A percent sign is accepted only where a percentage is expected.
    ("\\boxed{0.5\\%}", "0.5", false),
    ("\\boxed{\\frac{1}{2}\\%}", "\\frac12", false),
    ("\\boxed{12.5\\%}", "12.5", false),
    ("\\boxed{25\\%}", "25", true),
    ("\\boxed{25 percent}", "25", true),
    ("\\boxed{25\\%}", "25\\%", true),
    ("\\boxed{25}", "25\\%", true),
    ("\\boxed{12.5\\%}", "12.5\\%", true),
    ("\\boxed{26\\%}", "25", false),
    // Tuples are ordered, sets are not; assignments are matched by name.
    ("\\boxed{(3,2)}", "(2,3)", false),
    ("\\boxed{\\{3, 2\\}}", "\\{2, 3\\}", true),
    ("\\boxed{a=2, b=3}", "a=2, b=3", true),
    ("\\boxed{b=3, a=2}", "a=2, b=3", true),
    ("\\boxed{a=3, b=2}", "a=2, b=3", false),
    ("\\boxed{2, 3}", "a=2, b=3", true),
    ("\\boxed{3, 2}", "a=2, b=3", false),
    ("\\boxed{(2, 3)}", "a=2, b=3", true),
    ("\\boxed{(3, 2)}", "a=2, b=3", false),
    ("\\boxed{a=2}", "a=2, b=3", false),
    ("\\boxed{a=2, c=3}", "a=2, b=3", false),
];

#[test]
fn each_rule_and_its_near_misses() {
    let wrong: Vec<String> = RULES
        .iter()
        .filter(|(response, truth, want)| (score(response, truth) == 1.0) != *want)
        .map(|(response, truth, want)| format!("{response} vs {truth}: expected {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} rules wrong:\n{}",
        wrong.len(),
        RULES.len(),
        wrong.join("\n")
    );
}

#[test]
fn answers_past_the_length_cap_score_zero() {
    // Thin spaces normalise away, so only the cap can make this answer wrong.
    let long = format!("5{}", "\\,".repeat(MAX_ANSWER_LEN / 2));
    assert_eq!(score(&format!("\\boxed{{{long}}}"), "5"), 0.0);
    assert!(!is_equivalent("5", &long));
    let at_cap = format!("{}5", " ".repeat(MAX_ANSWER_LEN - 1));
    assert!(is_equivalent(&at_cap, "5"));
}

#[test]
fn literal_cases() {
    let wrong: Vec<String> = CASES
        .iter()
        .filter(|(response, truth, want)| (score(response, truth) == 1.0) != *want)
        .map(|(response, truth, want)| format!("{response} vs {truth}: expected {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} cases wrong:\n{}",
        wrong.len(),
        CASES.len(),
        wrong.join("\n")
    );
    assert!(CASES.len() >= 150);
}

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

fn gsm8k_truths() -> Vec<i64> {
    let text = std::fs::read_to_string(data("gsm8k/test.jsonl")).expect("GSM8K test set present");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("valid JSON");
            let answer = v["answer"].as_str().expect("answer is a string");
            let tail = answer.rsplit_once("####").expect("#### line").1;
            tail.trim()
                .replace(',', "")
                .parse()
                .expect("GSM8K answers are integers")
        })
        .collect()
}

/// Every GSM8K test answer, written in six ways a model writes it and with three near misses.
#[test]
fn gsm8k_answers_in_many_forms() {
    let truths = gsm8k_truths();
    assert_eq!(truths.len(), 1319);
    let mut failures = Vec::new();
    for n in truths {
        let gt = n.to_string();
        let right = [
            format!("So she earns \\boxed{{{n}}}."),
            format!("#### {n}"),
            format!("The answer is ${n}."),
            format!("\\boxed{{{n}.00}}"),
            format!("The final answer is {n} dollars."),
            format!("\\boxed{{\\${}}}", thousands(n)),
        ];
        let wrong = [
            format!("\\boxed{{{}}}", n + 1),
            format!("\\boxed{{{}}}", n - 1),
            format!("\\boxed{{{n}.5}}"),
        ];
        failures.extend(right.iter().filter(|r| score(r, &gt) != 1.0).cloned());
        failures.extend(wrong.iter().filter(|r| score(r, &gt) != 0.0).cloned());
        if n != 0 && score(&format!("\\boxed{{{}}}", -n), &gt) != 0.0 {
            failures.push(format!("-{n}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// `n` with comma thousands separators, as models often write money.
fn thousands(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[test]
fn math500_answers_are_self_equivalent_and_differ_from_neighbours() {
    let text = std::fs::read_to_string(data("math500/test.jsonl")).expect("MATH-500 present");
    let truths: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("valid JSON");
            v["answer"]
                .as_str()
                .expect("answer is a string")
                .to_string()
        })
        .collect();
    assert_eq!(truths.len(), 500);
    for t in &truths {
        assert!(is_equivalent(t, t), "{t}");
        assert_eq!(
            score(&format!("The answer is $\\boxed{{{t}}}$."), t),
            1.0,
            "{t}"
        );
    }
    // A ground truth matches a different MATH-500 answer only when both normalise alike (`5`, `x=5`).
    let mut false_matches = Vec::new();
    for pair in truths.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if normalize(a) != normalize(b) && is_equivalent(a, b) {
            false_matches.push(format!("{a} ~ {b}"));
        }
    }
    assert!(false_matches.is_empty(), "{false_matches:?}");
}
