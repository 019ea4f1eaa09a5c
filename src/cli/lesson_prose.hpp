// The prose of `attnscope lesson`'s steps, as data: a row per step (its key, title and
// paragraphs), read by the topics (lesson_topics.cpp), which add the commands and the
// questions computed from the runs. docs/classroom.md ("attnscope lesson") describes them.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope::cli::lesson {

struct Prose {
    std::string_view key;  // "TOPIC.STEP"
    std::string title;
    std::vector<std::string> words;  // paragraphs
};

inline const std::vector<Prose>& prose_table() {
    static const std::vector<Prose> table = {
        {"keys.scores",
         "Keys and the score matrix",
         {"Each position has a query q_i = x_i · W_Q (what it looks for) and a key k_j = x_j · W_K (an "
          "address to match). scores = Q · Kᵀ: one row per query, one column per key. In self-attention "
          "queries and keys come from the same sentence."}},
        {"keys.scale",
         "Scaling and Dk",
         {"Q and K share one width, Dk, so q_i · k_j is defined. The scores are scaled before the softmax."}},
        {"keys.softmax",
         "Softmax over the keys",
         {"The weights of one query come from a softmax along its row of scores."}},
        {"keys.padding",
         "Padding masks",
         {"Sentences of different lengths are padded to one length; key_padding_mask (1 = PAD) hides "
          "the padding keys from every query."}},
        {"keys.cross",
         "Cross-attention",
         {"A translator's decoder attends the encoder's output, the memory: French target tokens ask, "
          "English source tokens answer."}},
        {"keys.zeroed",
         "A zeroed key is not a masked key",
         {"An experiment: set one key vector to 0 and look at its column."}},
        {"keys.values",
         "Keys versus values",
         {"Keys and values are computed from the same tokens by different matrices, W_K and W_V."}},
        {"scaling.scale",
         "The scale",
         {"scores = Q · Kᵀ · scale: each score is a dot product of Dk features, scaled before the softmax."}},
        {"scaling.none", "Without the scale", {"The same run twice, with the scale and without it (--scale none)."}},
        {"scaling.dk",
         "Dk grows",
         {"Two bundles made alike but for Dk (attnscope make, in a scratch folder), their scores unscaled."}},
        {"scaling.saturates",
         "The softmax saturates",
         {"Large scores make nearly one-hot rows: --diagnose counts them, without and with the scale."}},
        {"masks.padding",
         "Padding",
         {"Two sentences of different lengths in one batch: the shorter one is padded with <pad> tokens, "
          "and key_padding_mask (1 = PAD) hides them as keys."}},
        {"masks.row", "The rest of the row", {"A mask takes keys out of the softmax; the keys left share the row."}},
        {"masks.causal",
         "Causal masks",
         {"A decoder predicts the next token, so a query may not look ahead: --causal hides every key after "
          "the query's own position."}},
        {"cross.memory",
         "Queries from the decoder, keys from the encoder",
         {"A translator's decoder attends the encoder's output, the memory: Q = x · W_Q from the French "
          "target tokens, K = memory · W_K and V = memory · W_V from the English source tokens."}},
        {"cross.softmax",
         "The softmax runs over the source",
         {"Each French token spreads its weight over the English tokens."}},
        {"cross.self", "Self-attention, for contrast", {"An encoder's own layers attend within the source sentence."}},
        {"values.projections",
         "Two projections of one x",
         {"Each token's x_j gives a key k_j = x_j · W_K, to be matched by the queries, and a value "
          "v_j = x_j · W_V, the content handed on."}},
        {"values.adds",
         "What the output adds",
         {"A common mistake: thinking the matched key is what gets added into the output."}},
        {"values.zeroed", "A zeroed key keeps its value", {"Set key 1 to 0: its weight changes, its value does not."}},
        {"heads.split",
         "Heads split the features",
         {"Multi-head attention runs H attentions side by side, each on its own slice of Q, K and V."}},
        {"heads.weights", "Each head its own weights", {"Both heads' weights for the same sentence."}},
        {"heads.concat",
         "Putting the heads back together",
         {"Each head mixes its own values; the contexts are concatenated and W_O mixes them into the output."}},
    };
    return table;
}

// The row of `key` (std::logic_error for a key the table lacks: a mistake of the topics).
inline const Prose& prose(std::string_view key) {
    for (const Prose& p : prose_table())
        if (p.key == key) return p;
    throw std::logic_error("lesson: no prose for " + std::string(key));
}

}  // namespace attnscope::cli::lesson
