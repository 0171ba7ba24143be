"""Hand-written everyday chat requests for measuring a drafter on text it was never trained on.

Written once by hand, in none of the tool's template shapes (`data.TEMPLATES`,
`data.EVAL_TEMPLATES`) and about none of their topics' phrasings: how-to, explain, write, list, code,
rewrite and plain questions, short and long. Never train on them: `heldout.check_disjoint` refuses an
evaluation whose requests share a long token run with any training prompt. Append, never edit, so that
numbers measured on an earlier prefix stay comparable.
"""

HELDOUT_REQUESTS = (
    # how-to
    "How can I stop my bathroom mirror from fogging up after a shower?",
    "What's the easiest way to remove a red wine stain from a cotton shirt?",
    "How should I prepare for my first day at a new job in an office?",
    "I keep forgetting to drink water during the day. Any simple tricks?",
    "How do you change a flat tire on a bike?",
    "What steps should I follow to repot a houseplant that has outgrown its pot?",
    "How can I make my small apartment feel less cluttered?",
    "My laptop gets really slow after a few hours. What can I check?",
    # explain
    "Why does bread go stale faster in the fridge?",
    "Can you explain what inflation is and why prices keep going up?",
    "What is the difference between weather and climate?",
    "Why do we have leap years?",
    "How does a refrigerator keep food cold?",
    "What actually happens when I put my phone in airplane mode?",
    "Why is the sky red at sunset but blue at noon?",
    "What does a credit score measure, and how can it go up?",
    # write
    "Draft a polite message to my neighbor asking them to keep their dog off my lawn.",
    "Write a thank-you note to my grandmother for the scarf she knitted me.",
    "Compose a short toast for my best friend's wedding.",
    "Write a product description for a reusable water bottle that keeps drinks cold for a day.",
    "Can you write a limerick about a cat who hates Mondays?",
    "Write a cover letter opening paragraph for a junior accountant position.",
    "Write a two-sentence horror story set in a supermarket.",
    "Help me write a text to cancel dinner plans without sounding rude.",
    # list
    "Name some good vegetables to grow on a balcony in summer.",
    "What should I pack for a weekend camping trip in autumn?",
    "Suggest a few board games that work well for two players.",
    "Give me ideas for a cheap but fun date night at home.",
    "What are common mistakes people make when they start running?",
    "Recommend some habits that help with falling asleep faster.",
    "Which questions should I ask when viewing an apartment to rent?",
    "List a handful of easy dinners I can cook in under twenty minutes.",
    # code
    "Write a Python function that checks whether a string is a palindrome.",
    "How do I read a CSV file into a list of dictionaries in Python?",
    "Show me a SQL query that counts orders per customer.",
    "What does the JavaScript map function do? Give a small example.",
    "Write a bash one-liner that finds the ten largest files in a folder.",
    "How do I reverse a list in Python without changing the original?",
    # rewrite
    "Make this sentence sound more professional: hey, can u send me the report asap?",
    "Rewrite this in simpler words: The committee has deferred its decision pending further review.",
    "Please shorten this: I am writing to let you know that I will not be able to attend the meeting on Friday.",
    "Turn these notes into a friendly paragraph: party Saturday, 7pm, bring snacks, my place.",
    "Fix the grammar: Me and him goes to the store yesterday and buyed apples.",
    # short questions and longer requests
    "Is it safe to eat eggs after the expiry date?",
    "Quick question: how many cups are in a liter?",
    "Should I learn guitar or piano first?",
    "I'm planning a three-day trip to a city I've never visited, on a small budget. How should I plan "
    "the days so I see the main sights without rushing, and how can I save money on food and transport?",
    "My team at work keeps missing deadlines because tasks fall through the cracks. We are five people and "
    "use email for everything. What would you change first, and how would you introduce it to the team?",
)
