"""The "How to read this" texts: what each view, display and experiment shows (``EXPLANATIONS``, by topic), the
caveat every attention view carries, and how the page writes tokens. The page's other texts are in
explorer/wording.py."""

from __future__ import annotations

from viz.tokens import CONTINUATION_MARK

CAVEAT = (
    "Attention weights show where each position *reads from*; they are not by themselves an "
    "explanation of the model's decision. Other heads, the feed-forward layers and the residual "
    "path also carry information, and different attention patterns can lead to the same output."
)

# How the page writes tokens, said in the help of the two views a page opens on (the cross-attention view, and the
# decoding steps in presenter mode); every chart, step line and quiz answer writes them this way.
TOKEN_MARKS = (
    "**How tokens are written.** The model reads and writes *pieces* of words. A piece that starts a word is "
    f"written as it is (*Mann*); a piece that continues the word before it starts with {CONTINUATION_MARK} "
    f"(*fahr*, *{CONTINUATION_MARK}en*). *<s>* starts the decoder's input and *</s>* ends a sentence. "
    "*Merge subwords into words* in the sidebar joins a word's pieces (*fahren*), as the quiz does for the "
    "source words."
)
EXPLANATIONS: dict[str, str] = {
    "target_language": (
        "This model translates into several languages and reads which one from a code in front of the sentence, "
        "such as >>fr<< for French. The code picked here is put in front of your sentence (you see it as the first "
        "source piece); a sentence that starts with its own code keeps it."
    ),
    "languages": (
        "This model translates between many languages. It reads the source language's code with your sentence (the "
        "first source piece, or the last) and is made to write the target language's code first: that first output "
        "token is forced, not chosen, as Hugging Face's generate forces it (forced_bos_token_id)."
    ),
    "encoder_self": (
        "**Encoder self-attention.** Every source token builds its new representation as a weighted "
        "average of all source tokens. Row = the token that is updated (query), column = the token "
        "it reads from (key); each row sums to 1. Heads in the same layer run side by side and often "
        "specialise: one looks at the previous word, one at the next, one at the end of the sentence."
    ),
    "decoder_self": (
        "**Decoder self-attention.** While writing the translation, each step may only read the "
        "tokens written before it (a *causal mask*): the upper-right triangle is empty. Row = the "
        "output token written at that step (hover: the decoder input it read, `<s>` at the first "
        "step), column = the output so far as the decoder reads it, `<s>` first."
    ),
    "cross": (
        "**Cross-attention.** This is where the translation looks at the source. Row = the output "
        "token written at that step (hover: the decoder input it read), column = the source piece "
        "attended to; each row sums to 1. In a trained model, strong weights often follow the word "
        "alignment between the two languages — but not always.\n\n" + TOKEN_MARKS
    ),
    "positional": (
        "**Positional encoding.** Attention by itself ignores word order, so a fixed pattern of "
        "sines and cosines is added to each token's embedding, one pattern per position. Low "
        "dimensions change quickly from position to position, high dimensions slowly, like the hands "
        "of a clock. Nearby positions get similar vectors (large dot products), so the model can "
        "tell near from far. The bar chart compares the size of this signal with the size of the "
        "token embedding it is added to."
    ),
    "embedding": (
        "**Embedding + positions.** Each piece becomes a learned vector (its *token embedding*, multiplied by "
        "√d_model as in section 3.4 of the paper), and the positional encoding of its position is added to it. "
        "The sum is what the first layer reads. The bars compare the three lengths per piece: where the token's bar "
        "is much longer, position is a small nudge on top of the word; the line above says how much of the sum is "
        "position on average. The heatmap shows the chosen vector dimension by dimension."
    ),
    "residual": (
        "**Add & Norm: the residual stream.** Every sublayer (attention, feed forward) *adds* its output to a running "
        "vector per position, the residual stream, and a layer norm rescales it (after the addition in the paper's "
        "post-norm layers, before the sublayer in pre-norm ones). The first heatmap is the length of that vector at "
        "each position after each sublayer; the second is how much each sublayer changed it, the length of what "
        "it added divided by the length of what it was added to (0.1: a small correction, 1: as large as "
        "everything before it)."
    ),
    "logit_lens": (
        "**Logit lens.** The decoder's residual after each layer, passed through the final norm (where the model has "
        "one) and the output layer (Linear + Softmax) as if that layer were the last: what the model would write if "
        "it stopped there. The top row, after the last layer, is the model's own prediction. Where a column turns "
        'dark is the layer at which the model "knows" the word it writes.'
    ),
    "feed_forward": (
        "**Feed Forward.** After attention, every position passes through the same two-layer network on its own "
        "(section 3.3): d_ff hidden *units*, each a weighted sum of the residual followed by the activation function "
        "(ReLU: negative values become 0). The heatmap shows the most active units at each piece; pick a piece for "
        "its strongest units, and a unit to see which pieces of the checkpoint's example sentences drive it most."
    ),
    "figure_map": (
        "**The model, as in Figure 1 of the paper.** The encoder is on the left, the decoder on the right, the inputs "
        "at the bottom and the output's Linear and Softmax on top; the N× boxes repeat in every layer (pick the "
        "layer above the drawing). Each box opens its view, and the view open now is marked. The number in a box is "
        "about the sentence on the page: attention, the mean entropy of its heads in bits (low: each head reads few "
        "tokens); Add & Norm, how much its sublayer changed the residual; Feed Forward, the share of its units that "
        "are active; the embedding, the share of position in the first layer's input; Softmax, the mean probability "
        "of the tokens written."
    ),
    "single": (
        "One head of one layer. Hover over a cell for the exact weight; colours are stretched so that "
        "small weights still show."
    ),
    "grid": (
        "Every head of every layer at once, on one colour scale: look for heads with a clear pattern "
        "(diagonal, shifted diagonal, one column)."
    ),
    "heads": (
        "The head view draws a line from each query token (left) to each key token (right); the "
        "stronger the weight, the darker the line. Each colour is one head, and it opens on the head "
        "picked beside it. Point at a word to see only its lines; click a word on the left to keep "
        "them (click it again to let go). Click a head's colour chip to switch it on or off; "
        "double-click a chip to see that head alone. Hover a line for its exact weight."
    ),
    "aggregates": (
        "**Mean over heads**: what the layer attends to on average. **Max over heads**: the strongest "
        "weight any head gives (rows need not sum to 1). **Rollout** (Abnar & Zuidema, 2020) "
        "multiplies the layers' attention, each mixed half-and-half with the identity for the "
        "residual connection, to estimate how much each input token contributes after several layers."
    ),
    "rollout_decoder_self": (
        "For decoder self-attention, rollout only follows the flow between target tokens; what comes "
        "in from the source through cross-attention is left out, so read it as a partial picture."
    ),
    "rollout_cross": "Rollout needs attention from a sequence to itself, so it is not defined for cross-attention.",
    "step": (
        "Step through the translation one token at a time. At each step the decoder sees the tokens "
        "written so far (starting with the model's start token: <s>, or </s> in mBART, M2M100 and NLLB, <pad> "
        "in OPUS-MT) and outputs a probability for every possible next token; "
        "the bars show the most likely ones. Beside them: where this step looks in the source "
        "(cross-attention); under both: where it looks in its own output so far (decoder self-attention).\n\n"
        + TOKEN_MARKS
    ),
    "sentence": "Type a sentence and press Enter: the model translates it and every view shows its attention.",
    "authors_decoding": (
        "An imported model comes with the settings its authors translate with (Hugging Face `generate`'s: beam "
        "size, length penalty, output limit, banned tokens, a forced </s> at the limit). On, the page decodes "
        "exactly as `generate` does with them, token for token; off, it uses this page's own search, whose "
        "settings are below."
    ),
    "temperature": (
        "Sampling draws each word from the model's probabilities instead of taking the most likely one. The "
        "temperature reshapes them first: below 1 the likely words get likelier (near 0 it is greedy search), "
        "above 1 the unlikely ones catch up (at 2 expect nonsense)."
    ),
    "top_k": "Draw only among the k most likely words (after the temperature). 0 keeps every word; 1 is greedy search.",
    "top_p": (
        "Draw only among the fewest most likely words whose probabilities add up to p (after the temperature and "
        "top-k): the long tail of unlikely words is cut off. 1 keeps every word."
    ),
    "seed": (
        "Where the random draws start: the same seed gives the same translation, so a link opens the same one; "
        "another seed may draw another."
    ),
    "sampled_step": (
        "The model's most likely next tokens at this step (▶ marks the one drawn), each with three bars: its "
        "probability under the model, after the temperature, and in the draw itself, where top-k and top-p have "
        "removed the tokens outside their set (0) and the rest share the whole probability. A token far down "
        "the model's list can still be drawn: that is what makes two samples differ."
    ),
    "sample_again": (
        "Draw the sentence's translation again and again, all at once, with these sampling settings: the table "
        "shows how often each translation came and how likely the model finds it (its log-probability: nearer 0 "
        "is likelier), beside greedy search's and beam search's."
    ),
    "teacher_forcing": (
        "With teacher forcing you type the target yourself: the model reads your tokens instead of "
        "its own, and you see the attention and probabilities it gives them."
    ),
    "special": (
        "Hiding special tokens removes their rows and columns **without renormalising**: the weight "
        "that went to <s> or </s> simply disappears, so rows may sum to less than 1."
    ),
    "quiz": (
        "**Predict, then reveal.** Before each step is shown, guess where the model will look in the "
        "source and which token it will write, then reveal. *Where it looks* is the source word with "
        "the largest cross-attention weight at this step in the chosen decoder layer, for the chosen "
        "head or the mean over its heads (a word's pieces are added up; </s> counts as a word). "
        "*What it writes* is right when you pick the token the model output. Each answered question "
        "is one point."
    ),
    "attribution": (
        "**Where does this word come from?** Pick an output word. Each row is one way of asking which source "
        "words it came from, as shares that add up to 1. *Attention* is the last decoder layer's cross-attention, "
        "averaged over its heads: where the layer **looks**. *Value norm* (Kobayashi et al. 2020) weighs each "
        "look by the size of what that source word **sends** (its value vector through the output projection): "
        "a head can look hard at a word, often `</s>` or a full stop, that sends almost nothing. *Gradient × "
        "attention* (Chefer et al. 2021) follows the attention of **every** layer back from the word, keeping "
        "only the looks that raise the word's score (attention times its gradient), so it also sees what the "
        "encoder mixed into each source position. *ALTI+* (Ferrando et al. 2022) splits every attention block's "
        "output, residual path included, into what each word adds, and follows it through the whole model: its "
        "row adds up to the share the **source** gave this word; the rest came from the words the model had "
        "already written (the bars below). Where the rows disagree, the attention map alone would have told the "
        "wrong story. None of these follows the feed-forward layers exactly: every method is an estimate, not a "
        "measurement."
    ),
    "evolution": (
        "**Training evolution.** The same head for the same sentence, saved at several moments of "
        "training: before any update (untrained), early in training, and the finished model. Every "
        "stage reads the same target (the finished model's translation, or the target you typed), so "
        "rows and columns mean the same in each panel and only the weights differ. An untrained head "
        "spreads its attention almost evenly; training sharpens it. Below the chart, each stage "
        "translates the sentence on its own."
    ),
    "train": (
        "**Train a Transformer and watch it learn.** Pick a toy task whose right attention is known in advance "
        "(copy: a diagonal; reverse: an anti-diagonal; sort: each output step reads the symbol it writes; svo-sov: "
        "the verb moves to the end), a model and a step budget, and press **Start**. Every second the page shows "
        "the training loss, the share of held-out inputs (never trained on) the model gets exactly right, and the "
        "cross-attention of one held-out example, teacher-forced on its right answer, with the cells the task says "
        "to read outlined in orange. A new model reads everything a little; as it learns, the outlined cells "
        "light up. Other views stay usable while it trains; **Explore this model** opens it in all of them."
    ),
    "train_positional": (
        "Sinusoidal: the paper's fixed encoding of each position. None: the model gets no position at all and "
        "sees each input as a bag of symbols. Learned: starts as the sinusoids and is trained with the model."
    ),
    "train_outline": (
        "Orange outlines: the source position the task says each output step should read. Teacher-forced on the "
        "right answer, so every row has one, whatever the model would write."
    ),
    "train_steps": "Training stops after this many steps (Stop ends it sooner; Continue adds this many more).",
    "train_continue": "Train the finished model for another budget of steps (change the learning rate or the steps).",
    "train_idle": (
        "No training yet. Press **Start** to train with the settings on the left, or pick an exercise under "
        "**Try this**. The curves and the attention appear here."
    ),
    "train_explore": (
        "Opens the trained model as the checkpoint “{name}” in every other view (decoding steps, heads, word "
        "sources, experiments), for this browser session only."
    ),
    "train_save_off": "Saving as a checkpoint is off on this server ({env}=1 turns it on).",
    "presenter": (
        "Presenter mode: large text and figures, fewer controls, one view at a time. Step through "
        "decoding with the ← and → keys (Home and End jump to the first and last step)."
    ),
    "export": (
        "One HTML file with this sentence's translation and the views on screen now (charts included, "
        "no internet needed to open it); print it from the browser for a handout."
    ),
    "experiments": (
        "**Experiments.** Change one thing and watch what the model does: another token at one step, "
        "heads switched off, word order taken away; or look closer: every hypothesis of beam search, the "
        "arithmetic inside one head, statistics of every head, two sentences side by side. Each uses this "
        "page's sentence and decoding settings."
    ),
    "whatif": (
        "**What if…?** At one step, make the model write another token (one of its top candidates, or a "
        "word you type) and let it go on from there. The steps before the fork read exactly what they "
        "read in the original — the decoder only looks back — so they stay the same; from the fork on, "
        "the model continues on its own, decoding as the original was decoded (greedy or beam search). "
        "Top: both translations token by token, coloured by how sure the model was, the forced token "
        "framed. Below: the same head in both, one row per step, the fork step framed."
    ),
    "beam_tree": (
        "**Beam search tree.** Beam search keeps a few hypotheses (the *beams*) alive. At each step it "
        "looks at the best 2 × beam-size one-token extensions of the live beams: the best are **kept**, "
        "the rest **pruned**, and one that ends with </s> is **finished**. Across = step, down = rank "
        "among that step's candidates. Hover a node for its token, its log-probability and its "
        "length-normalised score (what finished hypotheses are ranked by). The hypotheses the search "
        "returns are ringed; #1 is the translation. Pick a node below to see where that beam looked in "
        "the source when it chose its token."
    ),
    "internals": (
        "**Inside one head.** Section 3.2.1 of the paper, softmax(Q·Kᵀ / √d_k)·V, for one head and one "
        "query row, one small figure per stage, each titled with its shape: the query (Q) of the row, "
        "the keys (K) and values (V) of every position it may read; their dot products Q·Kᵀ; the scaling "
        "by 1/√d_k (it keeps the softmax from turning too sharp when d_k is large); the mask (padding, "
        "and in decoder self-attention the future); the masked scores (−∞ where hidden, drawn empty); "
        "the softmax — the attention weights every other view shows — and the output, the weighted sum "
        "of the values. ‖p_j·v_j‖ shows how much each key really adds to the output: a large weight on "
        "a short value vector adds little."
    ),
    "head_stats": (
        "**Head statistics.** A few numbers for every head, averaged over its query rows. *Entropy*: "
        "how spread its attention is (0 bits: all on one token). *Mean distance*: how far from the "
        "query's own position it looks (cross-attention: from the diagonal). *Same position / previous "
        "/ next token*: a previous-token head scores near 1 on *previous*. *On <s> / </s> / "
        "punctuation*: heads with nothing to do often park their attention on </s>. *Diagonality*: "
        "the share within one token of the diagonal — for cross-attention, how much it follows the "
        "word order like an alignment. Click a column title of the table to sort by it. Over a file "
        "(one sentence per line), each statistic is the mean over every query row of every sentence."
    ),
    "pairs": (
        '**Minimal pairs.** Two sentences that differ in one detail ("The dog is chasing the cat." / '
        '"The cat is chasing the dog."): both translations, the same head on each (one colour scale), and '
        "their difference, first − second (blue: the first sentence attends more; red: less; white: the "
        "same), on the tokens both share in the same order. Tokens that are not shared in order — here "
        "*dog* and *cat*, which swapped places — are left out of the difference."
    ),
    "ablation": (
        "**Switching heads off.** A removed head's output is replaced by zeros (or, with *mean*, by "
        "its average output on this sentence) and the rest of the model runs as usual, for this "
        "request only. Top: the original translation above the new one, aligned, changed tokens "
        "highlighted. Bars: each token of the original translation, its probability with every head "
        "and with the heads removed (both reading the original translation, so each bar pair compares "
        "the same token at the same step); the title gives the drop in log-probability of the whole "
        "original translation."
    ),
    "importance": (
        "**Head importance.** For every head, how much the log-probability of this translation drops "
        "when that head *alone* is removed (red: the translation relies on it; white: no change; blue: "
        "the translation becomes more likely without it). It is about this sentence only, and heads can "
        "stand in for each other: removing two together can hurt much more than each one alone."
    ),
    "word_order": (
        "**Without word order.** Attention by itself ignores word order: only the positional encoding "
        "tells positions apart. Remove it (from the encoder, the decoder or both) and the encoder sees "
        "the source as a bag of pieces, while the decoder tells its steps apart only through the causal "
        "mask. Or keep the model as it is and shuffle the words of the sentence. The two translations "
        "are shown aligned with the changes highlighted, and the same head in both."
    ),
}
