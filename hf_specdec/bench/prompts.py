"""The benchmark's prompts: open-ended chat requests and input-grounded tasks over passages.

Contract: all text is original and held out from the drafter's training prompts (hf_specdec.distill.data
uses "Write a short story about {}" and similar templates over a topic list; none of those appear here).
`encode` turns user messages into chat-templated token ids; `batches` left-pads them.
"""

from __future__ import annotations

import torch

CHAT_PROMPTS = (
    "My sourdough starter smells like nail polish remover. Is it ruined, and what should I do tonight?",
    "Draft a polite message to a neighbour whose hedge is blocking the pavement.",
    "Which is heavier, a kilogram of feathers or a kilogram of iron? Explain the trick in the question.",
    "Suggest a name for a cafe that also repairs bicycles, and say why it works.",
    "I keep forgetting to water my houseplants. Give me a simple routine that would stick.",
    "Convert 3 cups of flour to grams and tell me what assumption you made.",
    "What should I pack for a two-day canoe trip in late autumn?",
    "Rewrite this sentence so it sounds friendlier: 'Your report is late again.'",
    "How can a small town library attract more teenagers?",
    "Plan a cheap vegetarian dinner for four people using lentils.",
    "Why does bread go stale faster in the fridge than on the counter?",
    "Write a haiku about waiting for a delayed bus.",
    "What questions should I ask before adopting a retired greyhound?",
    "Explain the difference between weather and climate in two sentences.",
    "Give me a warm-up routine for a choir rehearsal that takes ten minutes.",
    "A friend says tomatoes are vegetables. How do I settle the argument kindly?",
)

# Passages of a few hundred tokens for summarise / rewrite / extract tasks, where the answer reuses
# spans of the input (what prompt lookup drafts from).
PASSAGES = (
    (
        "The harbour board of Kelmouth met on Tuesday evening to discuss the future of the old fish market. "
        "The building, a brick hall with a slate roof, was built in 1894 and has stood empty since the last "
        "wholesaler moved to the industrial estate in 2019. Councillor Ruth Abara opened the meeting by "
        "presenting three options. The first option is to sell the hall to a private developer, who has "
        "offered 1.2 million pounds and plans to convert it into twenty-four flats. The second option is to "
        "lease the hall to a community trust for a peppercorn rent, on the condition that the trust restores "
        "the roof within five years and opens a covered market on weekends. The third option is to demolish "
        "the hall and extend the car park, which would add about ninety spaces. Harbourmaster Dev Pillai "
        "said that the car park is full on most summer days and that visitors often park on the slipway, "
        "which blocks the lifeboat. Local historian Margaret Oyelaran argued that the hall is the last "
        "Victorian building on the quay and that demolishing it would be a loss for the town. The treasurer "
        "warned that the roof alone needs about 300,000 pounds of repairs and that the board cannot pay for "
        "them. After two hours of debate, the board voted five to three to open talks with the community "
        "trust, and asked the harbourmaster to study a smaller car park extension on the north side of the "
        "quay. A final decision is expected in March."
    ),
    (
        "Lithium-ion batteries age in two different ways. Calendar ageing happens even when a battery sits on "
        "a shelf: a thin layer called the solid electrolyte interphase slowly grows on the graphite anode, "
        "and every lithium ion trapped in that layer is lost for good. Heat speeds this up, and so does a "
        "high state of charge, which is why a phone left at full charge on a sunny dashboard loses capacity "
        "quickly. Cycle ageing happens when the battery is charged and discharged. Each cycle makes the "
        "electrode particles swell and shrink, which can crack them and expose fresh surface for the "
        "interphase to grow on. Fast charging adds another risk: at low temperatures, lithium can plate as "
        "metal on the anode instead of entering it, and plated lithium is both lost capacity and a safety "
        "hazard. Battery makers fight these effects in several ways. They add small amounts of additives to "
        "the electrolyte so that the interphase forms thin and stable during the first charge. They limit "
        "the charging voltage, so that a battery sold as full is really charged to about ninety percent. "
        "They warm the pack before fast charging in winter. For owners, the practical advice is simple: "
        "avoid keeping the battery at one hundred percent for long periods, avoid heat, and do not worry "
        "about occasional full discharges, which matter much less than time spent hot and full."
    ),
    (
        "To make the spiced carrot soup, start by peeling and chopping one kilogram of carrots into rounds "
        "about one centimetre thick. Dice two onions and crush three cloves of garlic. Warm two tablespoons "
        "of olive oil in a large pot over medium heat, add the onions and a pinch of salt, and cook them for "
        "eight minutes until soft but not brown. Add the garlic, one teaspoon of ground cumin, one teaspoon "
        "of ground coriander and half a teaspoon of chilli flakes, and stir for one minute until fragrant. "
        "Add the carrots and one litre of vegetable stock, bring the pot to a boil, then lower the heat and "
        "simmer with the lid on for twenty-five minutes, until a knife slides easily through the carrots. "
        "Take the pot off the heat and blend the soup until smooth. Stir in two hundred millilitres of "
        "coconut milk and the juice of half a lime. Taste it and add more salt if needed. If the soup is too "
        "thick, add a little hot water. Serve it in warm bowls with a spoon of yoghurt, a few coriander "
        "leaves and toasted pumpkin seeds on top. The soup keeps for three days in the fridge and freezes "
        "well for up to two months; reheat it gently and do not let it boil after the coconut milk is in."
    ),
    (
        "Notes from the Thursday product meeting. Present: Ana, Bilal, Chen, Dora and Emeka. Ana reported "
        "that the mobile app release is delayed by one week because the payment screen fails on older "
        "Android phones; Bilal will fix the layout bug by Monday. Chen showed the new onboarding flow. Users "
        "in the test group finished sign-up in forty seconds on average, down from seventy, but more of "
        "them skipped the notification permission. The team agreed to keep the new flow and to ask for "
        "notifications later, after the first completed order. Dora raised the support backlog: there are "
        "three hundred and twelve open tickets, most about refunds. Emeka will write a help page on refunds "
        "and Dora will add a link to it in the automatic reply, both by next Wednesday. The team discussed "
        "moving the weekly meeting to Tuesday mornings, but Chen has a standing call then, so the meeting "
        "stays on Thursday at ten. Ana asked everyone to update their tasks on the board before Friday so "
        "that the release checklist is accurate. The next meeting will review the refund numbers and decide "
        "whether to hire a temporary support person for the holiday season."
    ),
)

GROUNDED_TASKS = (
    "Summarise the following text in three sentences.",
    "Extract every number in the following text together with what it refers to, as a bulleted list.",
    "Rewrite the following text in plain language for a twelve year old, keeping all the facts.",
)


def grounded_prompts() -> list[str]:
    """Every (task, passage) pair once; prompt i pairs task i mod 3 with passage i mod 4 (3 and 4 are
    coprime), so any prefix of the list mixes tasks and passages."""
    count = len(GROUNDED_TASKS) * len(PASSAGES)
    return [f"{GROUNDED_TASKS[i % len(GROUNDED_TASKS)]}\n\n{PASSAGES[i % len(PASSAGES)]}" for i in range(count)]


def encode(tokenizer, prompts: list[str] | tuple[str, ...]) -> list[list[int]]:
    """Token ids of each user message, through the chat template when the tokenizer has one."""
    encoded = []
    for prompt in prompts:
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        else:
            ids = tokenizer(prompt)["input_ids"]
        encoded.append(list(ids))
    return encoded


def batches(prompt_ids: list[list[int]], batch_size: int, pad_token_id: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive prompts grouped `batch_size` at a time, left-padded, as generate() inputs.

    Returns:
        dicts with `input_ids` and `attention_mask`, each [rows, longest prompt of the group].
    """
    groups = []
    for start in range(0, len(prompt_ids), batch_size):
        group = prompt_ids[start : start + batch_size]
        width = max(len(ids) for ids in group)
        input_ids = torch.full((len(group), width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(group), width), dtype=torch.long)
        for row, ids in enumerate(group):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention_mask[row, width - len(ids) :] = 1
        groups.append({"input_ids": input_ids, "attention_mask": attention_mask})
    return groups
